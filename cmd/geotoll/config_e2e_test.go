package main

import (
	"net/http"
	"testing"

	"github.com/paulmach/orb/maptile"
)

// `tiers: {free: {shadow: true}}` starts, and shadows free only: a free
// key's second z2 tile passes, marked would-refuse; an anonymous caller's
// is refused.
func TestEndToEndOneTierField(t *testing.T) {
	clearConfigEnv(t)
	file, _, err := LoadConfig([]string{"-config", writeFile(t, "shadow.yaml", "throttle: {tiers: {free: {shadow: true}}}\n")})
	if err != nil {
		t.Fatal(err)
	}
	key := createKey(t, "free")
	base, _ := startServer(t, func(c *Config) { c.Throttle.Tiers = file.Throttle.Tiers })
	for _, caller := range []struct {
		key    string
		second int
		shadow string
		x      uint32 // two tiles of its own: a cached one costs 1
	}{{key, http.StatusOK, "would-refuse", 0}, {"", http.StatusTooManyRequests, "", 2}} {
		resp, body := get(t, tileURL(base, "places", maptile.New(caller.x, 1, 2)), caller.key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("first z2 tile (key %v): %d %s", caller.key != "", resp.StatusCode, short(body))
		}
		resp, body = get(t, tileURL(base, "places", maptile.New(caller.x+1, 1, 2)), caller.key)
		if resp.StatusCode != caller.second || resp.Header.Get("X-RateLimit-Shadow") != caller.shadow {
			t.Fatalf("second z2 tile (key %v): %d shadow %q, want %d %q: %s", caller.key != "", resp.StatusCode,
				resp.Header.Get("X-RateLimit-Shadow"), caller.second, caller.shadow, short(body))
		}
	}
}
