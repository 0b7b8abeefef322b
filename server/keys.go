package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geotoll/geotoll/apikeys"
)

// KeyRing is what readiness and metrics report of the in-memory API key
// set; *apikeys.Ring is the production one.
type KeyRing interface {
	Age() time.Duration        // since the last successful load began; -1 before it
	Stale() bool               // older than StaleAfter: admin rights suspended
	StaleAfter() time.Duration // the bound
	Len() int                  // active keys loaded
}

var _ KeyRing = (*apikeys.Ring)(nil)

// KeysCheck is the readiness check of the key ring. Fresh keys pass with
// their count and age ("ok: 12 keys, loaded 3s ago"). Keys never loaded,
// or stale, leave the process ready but degraded: keyed callers get 503
// (never loaded) or admin keys are refused (stale), while everything else
// is served — pulling the replica would not bring the keys back.
func KeysCheck(ring KeyRing) Check {
	return func(context.Context) error {
		age := ring.Age()
		switch {
		case age < 0:
			return &DegradedError{Detail: "API keys not loaded yet: keyed callers get 503"}
		case ring.Stale():
			return &DegradedError{Detail: fmt.Sprintf("API keys last loaded %s ago, more than %s: admin keys refused until they reload",
				age.Round(time.Second), ring.StaleAfter())}
		}
		return &ReadyNote{Detail: fmt.Sprintf("%d keys, loaded %s ago", ring.Len(), age.Round(time.Second))}
	}
}

// WatchKeys exports the key ring's state: geotoll_api_keys_age_seconds
// (since the last successful load; -1 before it), geotoll_api_keys_stale
// (1 while admin keys are refused for it) and geotoll_api_keys (active
// keys loaded).
func WatchKeys(reg prometheus.Registerer, ring KeyRing) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_api_keys_age_seconds",
			Help: "Seconds since the API keys were last loaded from the database (-1 before the first load).",
		}, func() float64 {
			if age := ring.Age(); age >= 0 {
				return age.Seconds()
			}
			return -1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_api_keys_stale",
			Help: "1 while the API keys are older than their bound and admin keys are refused, else 0.",
		}, func() float64 {
			if ring.Stale() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_api_keys",
			Help: "Active API keys loaded in memory.",
		}, func() float64 { return float64(ring.Len()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
