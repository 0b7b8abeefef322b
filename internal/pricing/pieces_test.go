package pricing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// TestTileOnPiecesCountsThePiecesOfTheCappedFeatures: a tile read from a
// layer's pieces (a BuilderSubdivide storage) takes at most the feature
// cap of the layer's ids near the tile, then reads every piece of those
// ids near it. Its estimate must count those pieces' vertices: scaling the
// vertices by cap / pieces (the model counts pieces, not ids) prices a
// tile whose features are cut into many pieces each at a fraction of what
// it reads.
func TestTileOnPiecesCountsThePiecesOfTheCappedFeatures(t *testing.T) {
	ctx := context.Background()
	tile := maptile.At(orb.Point{0.1, -0.1}, 10)
	env := tiles.Envelope(tile)
	cx, cy := (env.Min[0]+env.Max[0])/2, (env.Min[1]+env.Max[1])/2
	schema := testenv.Schema(t, "pieceprice", func(s string) []string {
		return []string{
			// 20 round polygons of ~2,000 vertices in the tile, each cut into
			// pieces of at most 32 vertices.
			fmt.Sprintf(`CREATE TABLE %s.src AS SELECT g AS id,
				ST_Buffer(ST_SetSRID(ST_MakePoint(%f + g * 100, %f - g * 100), 3857), 8000, 500)::geometry(Polygon, 3857) AS geom
				FROM generate_series(1, 20) AS g`, s, cx-1000, cy+1000),
			`CREATE TABLE ` + s + `.pieces AS SELECT id, ST_Subdivide(geom, 32)::geometry(Polygon, 3857) AS geom FROM ` + s + `.src`,
			`CREATE INDEX ON ` + s + `.pieces USING gist (geom)`,
			`ANALYZE ` + s + `.pieces`,
		}
	})
	pool := testenv.Pool(t)
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "rounds", Table: schema + ".src", GeometryColumn: "geom", SRID: 3857,
		GeometryKind: tiles.KindPolygon, MaxFeatures: 5}})
	if err != nil {
		t.Fatal(err)
	}
	layer := cat.Layer("rounds")
	pieces := density.Relation{Table: pgx.Identifier{schema, "pieces"}, GeometryColumn: "geom", SRID: density.SRIDWebMercator, Kind: density.Polygon}
	// As the serving registry records it: the pieces' rows over the rows
	// of the table they were cut from.
	if err := pool.QueryRow(ctx, `SELECT count(*)::float8 / count(DISTINCT id) FROM `+pieces.Table.Sanitize()).Scan(&pieces.PiecesPerRow); err != nil {
		t.Fatal(err)
	}
	models := pricing.NewModels(pool, density.Options{})
	e, err := pricing.NewEstimator(models, []*tiles.Layer{layer},
		func(*tiles.Layer, maptile.Zoom) (density.Relation, bool) { return pieces, true }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := models.Build(bctx); err != nil {
		t.Fatal(err)
	}
	est, ok := e.Tile(layer, tile)
	if !ok {
		t.Fatal("no estimate")
	}
	// What the tile query reads: the first MaxFeatures ids near the tile
	// (by id: the layer has no order_by), then every piece of theirs near it.
	pad := (env.Max[0] - env.Min[0]) * float64(layer.Buffer) / float64(layer.Extent)
	var read, pieceCount float64
	err = pool.QueryRow(ctx, `
		WITH box AS (SELECT ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857) AS g),
		     ids AS (SELECT DISTINCT p.id FROM `+pieces.Table.Sanitize()+` AS p, box WHERE p.geom && box.g ORDER BY p.id LIMIT $5::int)
		SELECT sum(ST_NPoints(p.geom))::float8, count(*)::float8
		FROM `+pieces.Table.Sanitize()+` AS p, box WHERE p.geom && box.g AND p.id IN (SELECT id FROM ids)`,
		env.Min[0]-pad, env.Min[1]-pad, env.Max[0]+pad, env.Max[1]+pad, layer.MaxFeatures).Scan(&read, &pieceCount)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("estimate %+v; the query reads %g pieces of %d features, %g vertices", est, pieceCount, layer.MaxFeatures, read)
	if est.Vertices < read/2 {
		t.Errorf("estimated %.0f vertices; the tile reads %.0f (the pieces of its %d capped features)", est.Vertices, read, layer.MaxFeatures)
	}
}
