package main

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/toll"
)

// The access log names who each request was charged to: behind a trusted
// proxy its remote address is the proxy's, and the client the budget
// charged (the one the proxy forwarded) was nowhere in the line. A key's
// caller is its id and tier, never the key; a request charged to nobody
// has no caller.
func TestEndToEndAccessLogNamesTheCallerCharged(t *testing.T) {
	t.Parallel()
	key := createKey(t, "free")
	logs := &logBuffer{}
	m := startLogging(t, func(c *Config) { c.HTTP.TrustedProxies = []string{"127.0.0.1/32"} },
		slog.New(slog.NewTextHandler(logs, nil)))
	base := "http://" + m.Addr()
	send(t, http.MethodGet, base+"/tiles/places/3/4/2.mvt", "", "X-Forwarded-For", "198.51.100.7", "X-Request-ID", "anon-1")
	send(t, http.MethodGet, base+"/tiles/places/3/4/3.mvt", "", "X-API-Key", key, "X-Request-ID", "key-1")
	send(t, http.MethodGet, base+"/tiles/places/3/4/4.mvt", "", "X-API-Key", "gt_"+strings.Repeat("x", 43),
		"X-Forwarded-For", "198.51.100.8", "X-Request-ID", "guess-1")
	send(t, http.MethodGet, base+"/healthz", "", "X-Request-ID", "health-1")
	lines := map[string]string{}
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if i := strings.Index(l, "request_id="); i >= 0 && strings.Contains(l, "msg=request ") {
			lines[strings.Fields(l[i+len("request_id="):])[0]] = l
		}
	}
	for id, want := range map[string][]string{
		"anon-1":  {"caller=ip:198.51.100.7", "tier=" + toll.AnonymousTier, "remote=127.0.0.1:"},
		"key-1":   {"caller=k:", "tier=free"},
		"guess-1": {"caller=ip:198.51.100.8", "tier=" + toll.FailedAuthTier},
	} {
		l, ok := lines[id]
		if !ok {
			t.Errorf("no access log line of request %s", id)
			continue
		}
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("request %s: %q lacks %q", id, l, w)
			}
		}
		if strings.Contains(l, key) || strings.Contains(l, "gt_x") {
			t.Errorf("request %s: the line holds a key: %q", id, l)
		}
	}
	if l := lines["health-1"]; l == "" || strings.Contains(l, "caller=") {
		t.Errorf("/healthz, charged to nobody: %q, want a line without a caller", l)
	}
}
