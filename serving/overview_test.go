package serving_test

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestPointCountsSumToRows: read from the overviews, and clustered by the
// query (the same layer before `geotoll prepare`), the point_count of
// a tile's features sum to the rows of the layer's table whose cluster
// cell lies in the tile or its buffer: the cells the query keeps
// (Generalization.CellRange). A cell's index is floor((x + π·R) / cell)
// on each axis; with the default buffer (64 of 4096 units, 8 pixels) and
// cell (8 pixels) the buffer is one whole cell, so those rows are exactly
// the rows with x in [xmin − buffer, xmax + buffer) and likewise y, of the
// tile's envelope (x and y in EPSG:3857). The clusters drawn in the tile
// itself (not its buffer) count exactly the rows of its envelope.
func TestPointCountsSumToRows(t *testing.T) {
	t.Parallel()
	owner, reader := testenv.Pool(t), testenv.ReadPool(t)
	name := unique("counts_")
	testenv.ForgetStorage(t, owner, name)
	cat := catalog(t, placesLayer(name))
	l := cat.Layer(name)
	// Without its storage the layer clusters in the query; then it reads
	// its overviews (every clustered zoom). Both must count the same.
	bare := catalog(t, placesLayer(name)).Layer(name)
	if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	store := tiles.NewStore(reader)

	var checked []maptile.Tile
	for x := uint32(0); x < 4; x++ { // every z2 tile
		for y := uint32(0); y < 4; y++ {
			checked = append(checked, maptile.New(x, y, 2))
		}
	}
	checked = append(checked, maptile.New(0, 0, 0), maptile.At(orb.Point{13.4, 52.5}, 5), maptile.At(orb.Point{13.4, 52.5}, 8),
		maptile.At(orb.Point{-0.12, 51.5}, 11), maptile.At(orb.Point{2.35, 48.86}, 12))
	nonEmpty := 0
	for _, tile := range checked {
		var tiles2 [2][]byte
		for i, layer := range []*tiles.Layer{bare, l} {
			mvtBytes, sum, features, want := countTile(t, store, owner, layer, tile, i == 1)
			tiles2[i] = mvtBytes
			if sum != want {
				t.Errorf("%v (%s): point_count sums to %d over %d features, %d rows lie in its cells",
					tile, layer.Source(tile.Z).Relation.Sanitize(), sum, features, want)
			}
			if want > 0 && i == 1 {
				nonEmpty++
			}
			t.Logf("%v from %s: %d features, %d points, %d bytes", tile, layer.Source(tile.Z).Relation.Sanitize(), features, sum, len(mvtBytes))
		}
		// Same cells, same representatives, same order: the same tile.
		if !bytes.Equal(tiles2[0], tiles2[1]) {
			t.Errorf("%v: clustered by the query %d bytes, from the overview %d: not the same tile", tile, len(tiles2[0]), len(tiles2[1]))
		}
	}
	if nonEmpty < 6 {
		t.Errorf("only %d of the tiles checked hold points: the test checks little", nonEmpty)
	}
}

// countTile renders tile of layer (from an overview when overview is set,
// else clustering its table) and returns its bytes, the sum of its
// point_counts, its features, and the rows of the table in the cells the
// tile keeps.
func countTile(t *testing.T, store *tiles.Store, owner *pgxpool.Pool, layer *tiles.Layer, tile maptile.Tile, overview bool) (mvtBytes []byte, sum, features, want int64) {
	t.Helper()
	src := layer.Source(tile.Z)
	if (src.Builder == tiles.BuilderOverview) != overview || !src.Clustered {
		t.Fatalf("%v reads %+v", tile, src)
	}
	r, err := store.Render(t.Context(), []*tiles.Layer{layer}, tile)
	if err != nil {
		t.Fatalf("%v: %v", tile, err)
	}
	if len(r.Reduced) != 0 {
		t.Fatalf("%v was reduced (%v): the sums would still hold, but the test means level 0", tile, r.Reduced)
	}
	var ids, counts []int64 // each cluster's representative and its count
	if len(r.MVT) > 0 {
		layers, err := mvt.Unmarshal(r.MVT)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range layers[0].Features {
			n, ok := f.Properties["point_count"].(float64)
			id, isID := f.ID.(float64)
			if !ok || n < 1 || !isID {
				t.Fatalf("%v: feature %v has point_count %v", tile, f.ID, f.Properties["point_count"])
			}
			sum += int64(n)
			features++
			ids, counts = append(ids, int64(id)), append(counts, int64(n))
		}
	}
	envelopeCounts(t, owner, src, layer.Extent, tile, ids, counts)
	if features >= int64(layer.MaxFeatures) {
		t.Fatalf("%v holds %d features, the cap: a capped tile drops counts", tile, features)
	}
	x0, x1, y0, y1 := src.Generalization.CellRange(tile, layer.Extent, layer.Buffer)
	err = owner.QueryRow(t.Context(), `
		SELECT count(*) FROM geotoll.places AS p,
		     LATERAL (SELECT floor((ST_X(p.geom_3857) + $1::float8) / $2::float8)::bigint AS cx,
		                     floor((ST_Y(p.geom_3857) + $1::float8) / $2::float8)::bigint AS cy) AS c
		WHERE c.cx BETWEEN $3 AND $4 AND c.cy BETWEEN $5 AND $6`,
		tiles.TileWidth(0)/2, src.Generalization.CellMetres, x0, x1, y0, y1).Scan(&want)
	if err != nil {
		t.Fatal(err)
	}
	return r.MVT, sum, features, want
}

// envelopeCounts checks that the clusters of tile whose representative
// (a point of the cluster's cell) lies in the tile itself, not its buffer,
// count exactly the rows of the table in the tile's envelope, [xmin, xmax)
// × [ymin, ymax) in EPSG:3857: cells are aligned to the tile, so the
// tile's own cells partition its envelope.
func envelopeCounts(t *testing.T, owner *pgxpool.Pool, src tiles.Source, extent int, tile maptile.Tile, ids, counts []int64) {
	t.Helper()
	x0, x1, y0, y1 := src.Generalization.CellRange(tile, extent, 0)
	env := tiles.Envelope(tile)
	var inTile, inEnvelope int64
	err := owner.QueryRow(t.Context(), `
		SELECT (SELECT coalesce(sum(f.n), 0)::bigint
		          FROM unnest($1::bigint[], $2::bigint[]) AS f(id, n) JOIN geotoll.places AS p ON p.id = f.id,
		               LATERAL (SELECT floor((ST_X(p.geom_3857) + $3::float8) / $4::float8)::bigint AS cx,
		                               floor((ST_Y(p.geom_3857) + $3::float8) / $4::float8)::bigint AS cy) AS c
		         WHERE c.cx BETWEEN $5 AND $6 AND c.cy BETWEEN $7 AND $8),
		       (SELECT count(*) FROM geotoll.places AS p
		         WHERE ST_X(p.geom_3857) >= $9 AND ST_X(p.geom_3857) < $10
		           AND ST_Y(p.geom_3857) >= $11 AND ST_Y(p.geom_3857) < $12)`,
		ids, counts, tiles.TileWidth(0)/2, src.Generalization.CellMetres, x0, x1, y0, y1,
		env.Min[0], env.Max[0], env.Min[1], env.Max[1]).Scan(&inTile, &inEnvelope)
	if err != nil {
		t.Fatal(err)
	}
	if inTile != inEnvelope {
		t.Errorf("%v: the clusters in the tile count %d points, its envelope holds %d rows", tile, inTile, inEnvelope)
	}
}
