package serving_test

import (
	"fmt"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/serving"
)

// BenchmarkTilesFromManyPieces times one tile's query (through the
// database, as the server runs it) over a layer of 20,000 small circles
// (33 vertices, in EPSG:4326, 0.05° apart) built into pieces and overviews
// in pieces by prepare, at z4–z10 over their middle: with a feature cap of
// 10, where a tile's candidates are a few of the ids near it, and with the
// default cap, where every id near it is drawn.
func BenchmarkTilesFromManyPieces(b *testing.B) {
	owner, f, name := setup(b, true, "manypieces_")
	f.exec(b, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, name text, geom geometry(Geometry, 4326))`)
	f.exec(b, `INSERT INTO {s}.shapes
		SELECT i, 'p' || i, ST_Buffer(ST_Point(10 + (i % 200) * 0.05, 45 + (i / 200) * 0.05, 4326), 0.01, 'quad_segs=8')
		FROM generate_series(0, 19999) AS i`)
	f.exec(b, `CREATE INDEX ON {s}.shapes USING gist (geom)`)
	f.exec(b, `ANALYZE {s}.shapes`)
	f.exec(b, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	built := shapesLayer(name, f.schema)
	built.SRID = 4326
	reader := servePieces(b, owner, catalog(b, built), name)
	if r := one(b, owner, catalog(b, built).Layer(name), serving.Options{}); r.Status != serving.Built {
		b.Fatalf("prepare: %+v", r)
	}
	for _, capped := range []int{10, 0} {
		layer := built
		layer.MaxFeatures = capped
		cat := catalog(b, layer)
		if _, err := cat.Refresh(b.Context(), reader); err != nil {
			b.Fatal(err)
		}
		l := cat.Layer(name)
		for z := maptile.Zoom(4); z <= 10; z++ {
			if !l.Source(z).Pieces {
				b.Fatalf("z%d reads %+v, not pieces", z, l.Source(z))
			}
			sql, args := l.Query(maptile.At(orb.Point{15, 47.5}, z))
			b.Run(fmt.Sprintf("cap=%d/z%02d", l.MaxFeatures, z), func(b *testing.B) {
				for b.Loop() {
					var mvt []byte
					var level int
					if err := reader.QueryRow(b.Context(), sql, args...).Scan(&mvt, &level); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
