package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geotoll/geotoll/tiles"
)

// storageCollector exports the serving storage of a tile catalog's layers
// (see tiles.Layer.StorageSummary), read at each scrape.
type storageCollector struct {
	catalog             *tiles.Catalog
	now                 func() time.Time
	age, rows, overview *prometheus.Desc
	heavy               *prometheus.Desc
}

// WatchTileStorage exports, per layer and builder, the age of its serving
// storage (seconds since `geotoll prepare` last found it current) and its
// rows, and per layer whether an overview band is configured but no
// overview is read (then its low zooms read the table itself) and
// whether it is heavy (tiles.Layer.Heavy: its largest rows are read whole
// above the overview band).
func WatchTileStorage(reg prometheus.Registerer, c *tiles.Catalog, now func() time.Time) error {
	return reg.Register(&storageCollector{
		catalog: c, now: now,
		age: prometheus.NewDesc("geotoll_tile_storage_age_seconds",
			"Seconds since geotoll prepare last found a layer's serving storage current, by layer and builder.",
			[]string{"layer", "builder"}, nil),
		rows: prometheus.NewDesc("geotoll_tile_storage_rows",
			"Rows of a layer's serving storage, by layer and builder.", []string{"layer", "builder"}, nil),
		overview: prometheus.NewDesc("geotoll_tile_overviews_missing",
			"1 when a layer has an overview band but reads no overview (run geotoll prepare), else 0.", []string{"layer"}, nil),
		heavy: prometheus.NewDesc("geotoll_tile_layer_heavy",
			"1 when a line or polygon layer's largest rows exceed its subdivide max_vertices and it reads no pieces (run geotoll prepare), else 0.",
			[]string{"layer"}, nil),
	})
}

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	ch <- c.rows
	ch <- c.overview
	ch <- c.heavy
}

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	send := func(d *prometheus.Desc, v float64, labels ...string) {
		if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...); err == nil { // fixed labels: cannot fail
			ch <- m
		}
	}
	for _, l := range c.catalog.Layers() {
		missing := 0.0
		if _, _, ok := l.OverviewZooms(l.Kind()); ok {
			missing = 1
		}
		for _, s := range l.StorageSummary() {
			if s.Builder == tiles.BuilderOverview {
				missing = 0
			}
			send(c.age, s.Age(now).Seconds(), l.Name, s.Builder)
			send(c.rows, float64(s.Rows), l.Name, s.Builder)
		}
		send(c.overview, missing, l.Name)
		heavy := 0.0
		if l.Heavy() != nil {
			heavy = 1
		}
		send(c.heavy, heavy, l.Name)
	}
}
