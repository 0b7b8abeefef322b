package pricing_test

import (
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// A point tile's query reads its buffer widened to whole cluster cells, so
// a coarse grid (cluster_px 32 or 64) reads well beyond the configured
// buffer. The estimate must price that wider area, or every such tile is
// sold for a fraction of the rows it reads. The points lie on a regular
// grid, so the rows read are proportional to the area read, and an
// estimate of the right area lands within a few percent of them.
func TestPointTilePricesTheBufferItReads(t *testing.T) {
	tile := maptile.New(548, 335, 10)
	env := tiles.Envelope(tile)
	w := env.Max[0] - env.Min[0]
	ftoa := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	// 768 × 768 points, 256 to a tile side, over the tile and a tile's
	// width around it: more than any buffer reaches.
	schema := testenv.Schema(t, "bufpts_", func(s string) []string {
		return []string{
			`CREATE TABLE ` + s + `.pts (id bigint PRIMARY KEY, geom geometry(Point, 3857) NOT NULL)`,
			`INSERT INTO ` + s + `.pts SELECT row_number() OVER (), ST_SetSRID(ST_MakePoint(` +
				ftoa(env.Min[0]-w) + ` + (i + 0.5) * ` + ftoa(w/256) + `, ` + ftoa(env.Min[1]-w) + ` + (j + 0.5) * ` + ftoa(w/256) + `), 3857)
			 FROM generate_series(0, 767) i, generate_series(0, 767) j`,
			`CREATE INDEX ON ` + s + `.pts USING gist (geom)`,
			`ANALYZE ` + s + `.pts`,
			`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
			`GRANT SELECT ON ` + s + `.pts TO geotoll_reader`,
		}
	})
	clusterPx := []int{8, 32, 64}
	var layers []tiles.Layer
	for _, px := range clusterPx {
		layers = append(layers, tiles.Layer{Name: "p" + strconv.Itoa(px), Table: schema + ".pts", GeometryColumn: "geom",
			GeometryKind: tiles.KindPoint, Generalize: tiles.Generalize{ClusterPixels: px}})
	}
	cat, err := tiles.NewCatalog(layers)
	if err != nil {
		t.Fatal(err)
	}
	pool := testenv.ReadPool(t)
	models := pricing.NewModels(pool, density.Options{})
	rel := density.Relation{Table: pgx.Identifier{schema, "pts"}, GeometryColumn: "geom", SRID: 3857, Kind: density.Point}
	e, err := pricing.NewEstimator(models, cat.Layers(),
		func(*tiles.Layer, maptile.Zoom) (density.Relation, bool) { return rel, true }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := models.Build(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, px := range clusterPx {
		l := cat.Layer("p" + strconv.Itoa(px))
		est, ok := e.Tile(l, tile)
		if !ok {
			t.Fatalf("cluster_px %d: no estimate", px)
		}
		// What the tile's query reads: its envelope expanded by the
		// buffer it binds in metres ($7), as its filter expands it.
		_, args := l.Query(tile)
		bufferM, ok := args[6].(float64)
		if !ok {
			t.Fatalf("cluster_px %d: the query's buffer in metres is a %T", px, args[6])
		}
		var read int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.pts
			WHERE geom && ST_Expand(ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857), $5::float8)`,
			env.Min[0], env.Min[1], env.Max[0], env.Max[1], bufferM).Scan(&read); err != nil {
			t.Fatal(err)
		}
		t.Logf("cluster_px %d: the query reads %.0f m around the tile, %d rows; estimate %.0f features", px, bufferM, read, est.Features)
		if est.Features < 0.9*float64(read) || est.Features > 1.1*float64(read) {
			t.Errorf("cluster_px %d: estimate %.0f features, the query reads %d rows", px, est.Features, read)
		}
	}
}
