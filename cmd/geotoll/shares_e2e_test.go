package main

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
)

// With database.key_max_conns at 3 of the 4 connections shipped, one key
// whose statements ignore cancellation never holds every connection of
// the pool: its fourth waits for a slot of the key's share and answers
// 503, while another key's tile is served from the connection left.
func TestEndToEndOneKeyNeverHoldsEveryConnection(t *testing.T) {
	t.Parallel()
	schema, exec := fixtureSchema(t)
	stuckView(exec)
	greedy, other := createKey(t, "greedy"), createKey(t, "greedy")
	base, _ := startServer(t, func(c *Config) {
		stuckPrices(c)
		c.Throttle.Tiers["greedy"] = TierConfig{Rate: 1000, Capacity: 10000, MaxInFlight: 16}
		c.Database.KeyMaxConns = c.Database.MaxConns - 1
		c.Layers = append(c.Layers, LayerConfig{Layer: layerFor(schema+".stuck", 500*time.Millisecond)})
	})
	owner := testenv.Pool(t)
	defer drained(t, owner, schema)
	get := func(key, url string) int {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-API-Key", key)
		resp, err := rawClient.Do(req)
		if err != nil {
			t.Errorf("%s: %v", url, err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	statuses := make([]int, DefaultConfig().Database.MaxConns)
	var wg sync.WaitGroup
	for i := range statuses {
		// A different tile each: nothing is cached or shared.
		wg.Go(func() { statuses[i] = get(greedy, tileURL(base, "stuck", maptile.New(uint32(i), 0, 14))) })
	}
	wg.Wait() // each answered 503: cut at its deadline, or no slot of the share within acquire_timeout
	running := requestsRunningIn(t, owner, schema)
	t.Logf("the greedy key's tiles: %v; %d of its statements still running", statuses, running)
	if want := int(DefaultConfig().Database.MaxConns) - 1; running > want {
		t.Errorf("%d of one key's statements running, want at most %d", running, want)
	}
	if running == 0 {
		t.Fatal("no stuck statement running after the answers: the fixture's statements ran shorter than their cut")
	}
	if code := get(other, tileURL(base, "places", maptile.At(berlinCentre, 14))); code != http.StatusOK {
		t.Errorf("another key's tile beside %d stuck statements: %d, want 200", running, code)
	}
}
