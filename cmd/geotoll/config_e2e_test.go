package main

import (
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/paulmach/orb/maptile"
)

// `tiers: {free: {shadow: true}}` starts, and shadows free only: of two
// z2 tiles asked at once (60 tokens each; a bucket holds 100 or 80, and
// they are charged before either is rendered) a free key's second passes,
// marked would-refuse; an anonymous caller's is refused.
func TestEndToEndOneTierField(t *testing.T) {
	clearConfigEnv(t)
	file, _, err := LoadConfig([]string{"-config", writeFile(t, "shadow.yaml", "throttle: {tiers: {free: {shadow: true}}}\n")})
	if err != nil {
		t.Fatal(err)
	}
	key := createKey(t, "free")
	base, _ := startServer(t, func(c *Config) {
		sizePrices(c) // a z2 tile costs max_cost: two of them do not fit the tier
		c.Throttle.Tiers = file.Throttle.Tiers
	})
	for _, caller := range []struct {
		key    string
		second int
		shadow string
		x      uint32 // two tiles of its own: a cached one costs 1
	}{{key, http.StatusOK, "would-refuse", 0}, {"", http.StatusTooManyRequests, "", 2}} {
		type answer struct {
			status int
			shadow string
		}
		answers := make(chan answer, 2)
		for dx := range uint32(2) {
			go func() {
				req, _ := http.NewRequest(http.MethodGet, tileURL(base, "places", maptile.New(caller.x+dx, 1, 2)), nil)
				if caller.key != "" {
					req.Header.Set("X-API-Key", caller.key)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answers <- answer{status: -1, shadow: err.Error()}
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answers <- answer{resp.StatusCode, resp.Header.Get("X-RateLimit-Shadow")}
			}()
		}
		got := []answer{<-answers, <-answers}
		want := answer{caller.second, caller.shadow}
		if !slices.Contains(got, answer{http.StatusOK, ""}) || !slices.Contains(got, want) {
			t.Errorf("two z2 tiles at once (key %v): %+v, want a 200 and a %+v", caller.key != "", got, want)
		}
	}
}
