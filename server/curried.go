package server

import (
	"strconv"
	"sync"

	"github.com/paulmach/orb/maptile"
	"github.com/prometheus/client_golang/prometheus"
)

// curried caches the children of a metric vector by their label values:
// a request then pays one map lookup per metric, not the vector's hashing
// and UTF-8 check of every value. The label values are bounded (see
// Metrics), and so is the cache; no child is ever deleted from a vector.
type curried[K comparable, M any] struct {
	m     sync.Map // K → M
	child func(K) M
}

func (c *curried[K, M]) get(k K) M {
	if v, ok := c.m.Load(k); ok {
		return v.(M)
	}
	v, _ := c.m.LoadOrStore(k, c.child(k))
	return v.(M)
}

// counters caches the children of a CounterVec with n labels (n ≤ 4).
func counters(v *prometheus.CounterVec, n int) *curried[[4]string, prometheus.Counter] {
	return &curried[[4]string, prometheus.Counter]{child: func(k [4]string) prometheus.Counter {
		return v.WithLabelValues(k[:n]...)
	}}
}

// observers caches the children of a HistogramVec labelled by one value.
func observers(v *prometheus.HistogramVec) *curried[string, prometheus.Observer] {
	return &curried[string, prometheus.Observer]{child: func(k string) prometheus.Observer {
		return v.WithLabelValues(k)
	}}
}

// layerZoom is the labels of a tile query's time.
type layerZoom struct {
	layer string
	z     maptile.Zoom
}

// queryObservers caches the children of the tile query histogram.
func queryObservers(v *prometheus.HistogramVec) *curried[layerZoom, prometheus.Observer] {
	return &curried[layerZoom, prometheus.Observer]{child: func(k layerZoom) prometheus.Observer {
		return v.WithLabelValues(k.layer, strconv.Itoa(int(k.z)))
	}}
}
