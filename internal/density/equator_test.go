package density_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/paulmach/orb"
)

// A feature a hair off the equator — a latitude of 1e-323, which the
// fence API accepts — builds into the model like one on it, in lon/lat
// and in a projected SRID alike: radians() of such a latitude underflowed,
// PostgreSQL raised it as an error, and every build of the model failed
// while the feature was there.
func TestFeaturesAHairOffTheEquatorBuild(t *testing.T) {
	for _, srid := range []int{4326, 3395} {
		t.Run(strconv.Itoa(srid), func(t *testing.T) { buildsOffTheEquator(t, srid) })
	}
}

// buildsOffTheEquator is the test in one SRID.
func buildsOffTheEquator(t *testing.T, srid int) {
	rel, owner := scratchTableSRID(t, "density_equator", "Polygon", srid, density.Polygon)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := owner.Exec(ctx, "INSERT INTO "+rel.Table.Sanitize()+` (geom)
		SELECT ST_Transform(ST_SetSRID(ST_MakePolygon(ST_MakeLine(ARRAY[
			ST_MakePoint(10, y), ST_MakePoint(11, y), ST_MakePoint(11, 1), ST_MakePoint(10, 1), ST_MakePoint(10, y)])), 4326), $1::int)
		FROM unnest(ARRAY[1e-323, -5e-324, 1e-310, 0]::float8[]) AS y`, srid)
	if err != nil {
		t.Fatal(err)
	}
	r, err := density.NewRefresher(testenv.ReadPool(t), rel, density.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.Model().BBox(orb.Bound{Min: orb.Point{10.2, 0.2}, Max: orb.Point{10.8, 0.8}}).Features; got < 4-1e-6 {
		t.Errorf("a box inside the four polygons estimates %.2f of them", got)
	}
}
