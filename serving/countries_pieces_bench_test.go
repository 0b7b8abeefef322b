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
					var ms [2]float64
					var area [2]float64
					var ids map[any]int
					for i, c := range []*tiles.Catalog{served, table} {
						l := c.Layer("countries")
						tt, err := timer.Time(b.Context(), l, t)
						if err != nil || tt.Censored {
							b.Fatalf("%v from %s: %v (censored %v)", t, l.Source(z).Relation.Sanitize(), err, tt.Censored)
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
