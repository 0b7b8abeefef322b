package serving_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/loadtest"
	"github.com/geotoll/geotoll/tiles"
)

// coastPoints are twenty points on the coasts of opendata.countries (each
// the point of a border nearest a chosen position, found once in SQL):
// the most detailed borders, where a tile reads the most pieces — Norway,
// Chile, Canada, Alaska, Russia, Indonesia, Greece, Croatia.
var coastPoints = []orb.Point{
	{5.3011, 60.4002}, {14.4977, 68.2114}, // NOR
	{-73.4984, -45.5006}, {-74.5153, -49.9893}, // CHL
	{-127.5134, 52.0769}, {-68.0046, 66.5117}, {-94.9927, 74.6775}, {-55.4910, 49.5074}, // CAN
	{-150.0000, 60.4897},                                                                                  // USA
	{33.0005, 69.1973}, {158.6845, 52.9780}, {100.0042, 76.4581}, {55.5464, 72.9421}, {142.0219, 46.9932}, // RUS
	{106.8007, -6.1011}, {121.0235, -8.4136}, {123.0179, -0.9063}, {130.7928, -0.4423}, // IDN
	{23.5001, 38.0005}, {15.5058, 43.8319}, // GRC, HRV
}

// BenchmarkCountriesPieces times the z8–z12 tiles over coastPoints of
// layer countries (opendata.countries, loadtest/opendata.yaml, after
// `geotoll opendata` and `geotoll prepare`): the query served (the
// layer's pieces) against the same layer read from its table, tile by
// tile in turn, each the median of three runs of the layer's own query as
// the read role given by GEOTOLL_BENCH_READ_DATABASE_URL (skipped
// without), jit off (loadtest.TileTimer). Per zoom it reports the median
// ms of each side and the table's time over the served one: the median
// and the least over the tiles, and the ratio of the sums. It fails when
// a served tile holds two features of one id or covers an area more than
// 1 % away from the table's tile. Run with -benchtime=1x; -v logs every
// tile.
func BenchmarkCountriesPieces(b *testing.B) {
	pool, served, table := countriesBench(b)
	timer := loadtest.TileTimer{Pool: pool, Runs: 3, Timeout: time.Minute}
	store := tiles.NewStore(pool)
	for z := maptile.Zoom(8); z <= 12; z++ {
		b.Run(fmt.Sprintf("z%02d", z), func(b *testing.B) {
			var ratios, servedMS, tableMS []float64
			for b.Loop() {
				for _, p := range coastPoints {
					t := maptile.At(p, z)
					ms, area, ids := timeBoth(b, timer, store, [2]*tiles.Layer{served.Layer("countries"), table.Layer("countries")}, t)
					if d := math.Abs(area[0] - area[1]); d > 0.01*area[1] {
						b.Errorf("%v: served covers %.0f units², the table %.0f", t, area[0], area[1])
					}
					b.Logf("%v: served %.2f ms, table %.2f ms (%.1f×), %d ids, area %.0f / %.0f", t, ms[0], ms[1], ms[1]/ms[0], len(ids), area[0], area[1])
					servedMS, tableMS = append(servedMS, ms[0]), append(tableMS, ms[1])
					ratios = append(ratios, ms[1]/ms[0])
				}
			}
			b.ReportMetric(loadtest.Median(servedMS), "served-ms")
			b.ReportMetric(loadtest.Median(tableMS), "table-ms")
			b.ReportMetric(loadtest.Median(ratios), "median-ratio")
			b.ReportMetric(slices.Min(ratios), "min-ratio")
			b.ReportMetric(sum(tableMS)/sum(servedMS), "total-ratio")
		})
	}
}

// sum is the sum of xs.
func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// places are fourteen places of the world for the overview band's
// tiles: cities, and the antimeridian, the Arctic and Greenland.
var places = []orb.Point{{13.4, 52.5}, {-74, 40.7}, {37.6, 55.75}, {139.7, 35.7}, {-46.6, -23.5}, {151.2, -33.9}, {31.2, 30},
	{-149.9, 61.2}, {177, 64.7}, {-170, 65}, {100, 60}, {-100, 50}, {10, 78}, {-50, 72}}

// BenchmarkCountriesOverviewPieces times the z2–z7 tiles of layer
// countries (loadtest/opendata.yaml, after `geotoll opendata` and
// `geotoll prepare`) around places — each place's tile and the eight
// around it — read from its overviews, stored in pieces, against the same
// tiles of layer countries_whole, the same table whose overviews are
// stored whole (subdivide off), tile by tile in turn, each the median of
// three runs of the layer's own query as the read role given by
// GEOTOLL_BENCH_READ_DATABASE_URL (skipped without), jit off
// (loadtest.TileTimer). Per zoom it reports the median ms of each side,
// the ratio of their sums (whole over pieces) and the largest area
// difference. It fails when a tile from the pieces holds two features of
// one id or covers an area more than 1 % (and one unit²) away from the
// whole overview's. Run with -benchtime=1x; -v logs every tile.
func BenchmarkCountriesOverviewPieces(b *testing.B) {
	pool, _, _ := countriesBench(b)
	cat, err := tiles.NewCatalog([]tiles.Layer{countriesLayer("countries", false), countriesLayer("countries_whole", true)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cat.Refresh(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	pieces, whole := cat.Layer("countries"), cat.Layer("countries_whole")
	timer := loadtest.TileTimer{Pool: pool, Runs: 3, Timeout: time.Minute}
	store := tiles.NewStore(pool)
	for z := maptile.Zoom(2); z <= 7; z++ {
		if !pieces.Source(z).Pieces || whole.Source(z).Builder != tiles.BuilderOverview || whole.Source(z).Pieces {
			b.Fatalf("z%d: countries reads %+v, countries_whole %+v: run geotoll prepare with loadtest/opendata.yaml", z, pieces.Source(z), whole.Source(z))
		}
		b.Run(fmt.Sprintf("z%02d", z), func(b *testing.B) {
			var piecesMS, wholeMS []float64
			worst := 0.0
			for b.Loop() {
				piecesMS, wholeMS, worst = nil, nil, 0
				for _, t := range around(places, z) {
					ms, area, ids := timeBoth(b, timer, store, [2]*tiles.Layer{pieces, whole}, t)
					d := math.Abs(area[0] - area[1])
					if d > 0.01*area[1]+1 {
						b.Errorf("%v: the pieces cover %.0f units², the whole overview %.0f", t, area[0], area[1])
					}
					if area[1] > 0 {
						worst = max(worst, d/area[1])
					}
					b.Logf("%v: pieces %.2f ms, whole %.2f ms, %d ids, area %.0f / %.0f", t, ms[0], ms[1], len(ids), area[0], area[1])
					piecesMS, wholeMS = append(piecesMS, ms[0]), append(wholeMS, ms[1])
				}
			}
			b.ReportMetric(loadtest.Median(piecesMS), "pieces-ms")
			b.ReportMetric(loadtest.Median(wholeMS), "whole-ms")
			b.ReportMetric(slices.Max(piecesMS), "pieces-max-ms")
			b.ReportMetric(slices.Max(wholeMS), "whole-max-ms")
			b.ReportMetric(sum(wholeMS)/sum(piecesMS), "total-ratio")
			b.ReportMetric(100*worst, "worst-area-%")
		})
	}
}

// countriesLayer is a layer of opendata.countries as loadtest/opendata.yaml
// configures it (whole: subdivide off).
func countriesLayer(name string, whole bool) tiles.Layer {
	return tiles.Layer{
		Name: name, Table: "opendata.countries", GeometryColumn: "geom_3857", SRID: 3857,
		Properties: []string{"a3", "vertices", "valid"}, MaxFeatures: 5000, GeometryKind: tiles.KindPolygon,
		StatementTimeout: time.Minute, Subdivide: tiles.Subdivide{Off: whole},
	}
}

// around returns the tiles of zoom z at each of points and the eight
// around it (those inside the world), each once.
func around(points []orb.Point, z maptile.Zoom) []maptile.Tile {
	var out []maptile.Tile
	n := int64(1) << z
	for _, p := range points {
		c := maptile.At(p, z)
		for dx := int64(-1); dx <= 1; dx++ {
			for dy := int64(-1); dy <= 1; dy++ {
				x, y := int64(c.X)+dx, int64(c.Y)+dy
				if x < 0 || y < 0 || x >= n || y >= n {
					continue
				}
				t := maptile.New(uint32(x), uint32(y), z) //nolint:gosec // G115: within 0..2^z
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// timeBoth times tile t of each of layers (the median of the timer's runs;
// a failed or censored run fails b) and returns the times, the area each
// covers, and the features per id of the first, failing b when one id is
// drawn as two features.
func timeBoth(b *testing.B, timer loadtest.TileTimer, store *tiles.Store, layers [2]*tiles.Layer, t maptile.Tile) (ms, area [2]float64, ids map[any]int) {
	b.Helper()
	for i, l := range layers {
		tt, err := timer.Time(b.Context(), l, t)
		if err != nil || tt.Censored {
			b.Fatalf("%v from %s: %v (censored %v)", t, l.Source(t.Z).Relation.Sanitize(), err, tt.Censored)
		}
		ms[i] = tt.MS
		got, a, _ := tileArea(b, store, l, t)
		if i == 0 {
			ids = got
		}
		area[i] = a
	}
	for id, n := range ids {
		if n > 1 {
			b.Errorf("%v: id %v drawn as %d features", t, id, n)
		}
	}
	return ms, area, ids
}
