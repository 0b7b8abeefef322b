package tiles_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// TestCurveRowIsTheLayersMisfitNotAnInternalError: a curve (a
// CURVEPOLYGON, which the tile query's clip does not take) in a polygon
// layer's table fails the tiles that meet it as the layer's misfit — a
// 503 naming the layer — never a 500 ("internal": PostGIS's
// "lwgeom_get_basic_type: Invalid type" was not known as the data's).
// A tile that does not meet it draws.
func TestCurveRowIsTheLayersMisfitNotAnInternalError(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.curves (id bigint PRIMARY KEY, geom geometry(Geometry, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.curves VALUES
		(1, ST_GeomFromText('CURVEPOLYGON(CIRCULARSTRING(0 0, 400000 0, 400000 400000, 0 400000, 0 0))', 3857)),
		(2, ST_MakeEnvelope(-5000000, -5000000, -4000000, -4000000, 3857))`)
	f.exec(t, `CREATE INDEX ON {s}.curves USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.curves TO geotoll_reader`)
	cat := newCatalog(t, tiles.Layer{Name: "curves", Table: f.table("curves"), GeometryColumn: "geom", SRID: 3857, IDColumn: "id",
		GeometryKind: tiles.KindPolygon, Generalize: tiles.Generalize{Off: true}})
	store := tiles.NewStore(testenv.ReadPool(t))
	_, err := store.Tile(t.Context(), resolve(t, cat, "curves"), maptile.New(64, 63, 7)) // meets the curve, not the square
	var p *problem.Error
	if !errors.As(err, &p) || p.Code != problem.Unavailable || !strings.Contains(p.Detail, `layer "curves"`) {
		t.Errorf("the tile meeting the curve: %v, want a 503 problem naming the layer", err)
	}
	if _, decoded := render(t, store, resolve(t, cat, "curves"), maptile.At(orb.Point{-40.4, -37.5}, 4)); len(decoded) == 0 {
		t.Error("the tile of the square alone draws nothing")
	}
}
