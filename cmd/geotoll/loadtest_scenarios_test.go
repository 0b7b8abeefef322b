package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/loadtest"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// loopback reports whether the database URL dsn names this host: a
// loopback address, or a Unix socket (no host).
func loopback(dsn string) bool {
	u, err := url.Parse(dsn)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "" || h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// postgresHere reports whether a process named postgres runs on this
// host, where this test can see it.
func postgresHere(t *testing.T) bool {
	comms, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == "postgres" {
			return true
		}
	}
	return false
}

// TestLoadtestScenariosEndToEnd runs the three measuring instruments
// against a whole server (cache off, a tier that never refuses) on the demo
// data, as `geotoll loadtest fidelity|zooms|ceiling` would.
func TestLoadtestScenariosEndToEnd(t *testing.T) {
	key := createKey(t, "bench")
	base, cfg := startServer(t, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Throttle.Tiers["bench"] = TierConfig{Rate: 1e9, Capacity: 1e9}
		c.Database.AdminURL = testenv.DatabaseURL(t) // reads pg_stat_statements (-db-time server)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "-url", base, "-key", key, "-layer", "places")
		if err := runLoadtest(ctx, cfg, args, &out, &errOut); err != nil {
			t.Fatalf("loadtest %v: %v\n%s", args, err, errOut.String())
		}
		return out.String()
	}

	file := filepath.Join(t.TempDir(), "fidelity.json")
	out := run("fidelity", "-tiles", "16", "-maxzoom", "14", "-json", file)
	if !regexp.MustCompile(`(?m)^\s+all\s+1[4-6]\s+(-?[01]\.\d{3}|NaN)\s`).MatchString(out) {
		t.Errorf("no ρ over all tiles in:\n%s", out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Samples []struct {
			Z      int     `json:"z"`
			Price  float64 `json:"price"`
			Cost   float64 `json:"cost"`
			Status int     `json:"status"`
			DBms   float64 `json:"db_ms"`
		} `json:"samples"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil || len(rep.Samples) < 14 {
		t.Fatalf("%d samples, %v", len(rep.Samples), err)
	}
	for i, s := range rep.Samples {
		if s.Price < 0.01 || s.Cost < 0.01 || (s.Status != 200 && s.Status != 204) || s.DBms <= 0 || s.Z > 14 {
			t.Errorf("sample %d: %+v", i, s)
		}
	}

	// The server's own statements, counted by pg_stat_statements.
	file = filepath.Join(t.TempDir(), "server.json")
	out = run("fidelity", "-tiles", "6", "-minzoom", "9", "-maxzoom", "12", "-db-time", "server", "-json", file)
	if !strings.Contains(out, "DB time: the server's own statements (pg_stat_statements of geotoll_reader), median of 3 requests") {
		t.Errorf("report:\n%s", out)
	}
	if raw, err = os.ReadFile(file); err != nil {
		t.Fatal(err)
	}
	rep.Samples = nil
	if err := json.Unmarshal(raw, &rep); err != nil || len(rep.Samples) != 6 {
		t.Fatalf("%d samples, %v", len(rep.Samples), err)
	}
	spent := 0.0
	for i, s := range rep.Samples {
		if s.DBms < 0 || (s.Status != 200 && s.Status != 204) {
			t.Errorf("sample %d: %+v", i, s)
		}
		spent += s.DBms
	}
	if spent <= 0 {
		t.Errorf("the server's statements took %v ms over 6 tiles", spent)
	}

	out = run("zooms", "-minzoom", "10", "-maxzoom", "12", "-per-zoom", "2")
	for _, z := range []string{"10", "11", "12"} {
		if !regexp.MustCompile(`(?m)^\s+` + z + `\s+2\s+\d+`).MatchString(out) {
			t.Errorf("no row for z%s with 2 tiles in:\n%s", z, out)
		}
	}

	out = run("ceiling", "-duration", "1s", "-clients", "2", "-threads", "1", "-warm", "3")
	if !strings.Contains(out, "each past its first 3 tiles") {
		t.Errorf("the ceiling's warm-up is not said in:\n%s", out)
	}
	rows := regexp.MustCompile(`(?m)^\s+(z14|z8-10)\s+(\d+)\s+(\d+)\s+(\d+)\s+(identity|gzip)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s`).FindAllStringSubmatch(out, -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 rows (2 lists × identity, gzip) in:\n%s", out)
	}
	for _, r := range rows {
		ceiling, _ := strconv.Atoi(r[3])
		unsent, _ := strconv.Atoi(r[4])
		rate, _ := strconv.Atoi(r[6])
		if ceiling <= 0 || unsent <= 0 || rate <= 0 {
			t.Errorf("row %q: pgbench %d/s, not sent %d/s, geotoll %d/s", strings.TrimSpace(r[0]), ceiling, unsent, rate)
		}
	}
	// Where this host's CPU went, each run (Linux): every run has its row
	// and spent the host's CPU; with the database a process here, it spent
	// more on pgbench's runs than pgbench did — and other tests' load can
	// only add to it.
	cpu := regexp.MustCompile(`(?m)^\s+(z14|z8-10)\s+(pgbench|not sent|identity|gzip)\s+(\d+)\s+(\d+)\s+(-?\d+)\s+(-?\d+)\s+(-?\d+)\s+(-?\d+)\s+(-?\d+)\s+(\d+)\s+([\d.]+)\s*$`).FindAllStringSubmatch(out, -1)
	if _, err := os.Stat("/proc/stat"); runtime.GOOS != "linux" || err != nil {
		if len(cpu) != 0 || !strings.Contains(out, "not read for every run") {
			t.Errorf("no /proc here, yet CPU rows, or no word of it, in:\n%s", out)
		}
	} else {
		if len(cpu) != 8 {
			t.Fatalf("want 8 rows of CPU a tile (2 lists × pgbench, not sent, identity, gzip) in:\n%s", out)
		}
		// Whether PostgreSQL runs here is read from /proc apart from the
		// table's own reading, which must then have seen it too.
		local := postgresHere(t) && loopback(testenv.ReadDatabaseURL(t))
		if local && strings.Contains(out, "No process named postgres was seen") {
			t.Errorf("a process named postgres runs on this host, but the table says none was seen:\n%s", out)
		}
		for _, r := range cpu {
			tiles, _ := strconv.Atoi(r[3])
			host, _ := strconv.Atoi(r[4])
			pg, _ := strconv.Atoi(r[5])
			client, _ := strconv.Atoi(r[8])
			pgbench := r[2] == "pgbench" || r[2] == "not sent"
			if tiles <= 0 || host <= 0 || (local && pgbench && (client <= 0 || pg <= client)) {
				t.Errorf("CPU row %q: %d tiles, host %d µs, postgres %d, client %d (PostgreSQL here: %v)", strings.TrimSpace(r[0]), tiles, host, pg, client, local)
			}
		}
	}

	// With a key the server does not know every tile is refused: zooms and
	// ceiling print what they saw and fail, rather than exit 0 with a
	// report in which no tile was drawn (fidelity stops at the first
	// tile that was not drawn: TestFidelityFailsUnlessTheTileIsDrawn).
	for _, sc := range [][]string{
		{"zooms", "-minzoom", "10", "-maxzoom", "11", "-per-zoom", "2"},
		{"ceiling", "-duration", "1s", "-clients", "2", "-threads", "1", "-warm", "3"},
	} {
		var out, errOut bytes.Buffer
		args := append(sc, "-url", base, "-key", "not-a-key-of-this-server", "-layer", "places")
		err := runLoadtest(ctx, cfg, args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "no tile") || !strings.Contains(err.Error(), "401") {
			t.Errorf("loadtest %s with an unknown key: error %v, want one saying no tile was drawn, with the statuses (output:\n%s)", sc[0], err, out.String())
		}
		if !strings.Contains(out.String(), "401") {
			t.Errorf("loadtest %s with an unknown key: the report does not show the 401s:\n%s", sc[0], out.String())
		}
	}
	// Nor does a zoom range with no tile in it pass for a measurement.
	var empty bytes.Buffer
	err = runLoadtest(ctx, cfg, []string{"zooms", "-minzoom", "9", "-maxzoom", "8", "-url", base, "-key", key, "-layer", "places"}, &empty, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no tile") {
		t.Errorf("loadtest zooms from z9 to z8: error %v, want one saying there was no tile to ask for (output:\n%s)", err, empty.String())
	}
}

func TestLoadtestScenarioRejectsUnknownLayer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.URL = "postgres://127.0.0.1:1/none"
	err := runLoadtest(context.Background(), cfg, []string{"fidelity", "-layer", "nope"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `layer "nope"`) {
		t.Fatalf("err = %v", err)
	}
}

// The instruments time the query the server runs: a prepared point
// layer's low zooms read its overviews, in the instrument as in `serve`.
func TestScenarioLayerReadsTheServingStorage(t *testing.T) {
	prepareDemo(t)
	cfg := DefaultConfig()
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	layer, pool, err := scenarioSetup(t.Context(), cfg, "places")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, z := range []maptile.Zoom{0, 2, 12} {
		if src := layer.Source(z); src.Builder != tiles.BuilderOverview || !src.Clustered {
			t.Errorf("z%d reads %s (builder %q), not its overview", z, src.Relation.Sanitize(), src.Builder)
		}
	}
	if src := layer.Source(13); src.Builder != "" || src.Clustered {
		t.Errorf("z13 reads %s (builder %q, clustered %v), not the table", src.Relation.Sanitize(), src.Builder, src.Clustered)
	}
}

// The scenarios' flags are bounded, and checked before anything is
// measured: a ceiling run under a second was pgbench -T 0 (which pgbench
// refuses), a fraction of a second one pgbench run shorter than geotoll's,
// and -tiles, -per-zoom and -clients took any number.
func TestLoadtestScenarioFlagsAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.URL = "postgres://127.0.0.1:1/none"
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"ceiling", "-duration", "900ms"}, "-duration"},
		{[]string{"ceiling", "-duration", "1500ms"}, "-duration"},
		{[]string{"ceiling", "-duration", "11m"}, "-duration"},
		{[]string{"ceiling", "-clients", "0"}, "-clients"},
		{[]string{"ceiling", "-clients", "257"}, "-clients"},
		{[]string{"ceiling", "-clients", "2", "-threads", "3"}, "-threads"},
		{[]string{"ceiling", "-clients", "1", "-threads", "2"}, "-threads"}, // set: refused, not lowered
		{[]string{"ceiling", "-threads", "0"}, "-threads"},
		{[]string{"ceiling", "-warm", "-1"}, "-warm"},
		{[]string{"ceiling", "-warm", "1001"}, "-warm"},
		{[]string{"ceiling", "-warm-timeout", "900ms"}, "-warm-timeout"},
		{[]string{"ceiling", "-warm-timeout", "11m"}, "-warm-timeout"},
		{[]string{"fidelity", "-tiles", "0"}, "-tiles"},
		{[]string{"fidelity", "-tiles", "2001"}, "-tiles"},
		{[]string{"zooms", "-per-zoom", "0"}, "-per-zoom"},
		{[]string{"zooms", "-per-zoom", "257"}, "-per-zoom"},
		{[]string{"fidelity", "-minzoom", "17"}, "no tile to ask for"}, // above the default -maxzoom 16
		{[]string{"zooms", "-minzoom", "9", "-maxzoom", "8"}, "no tile to ask for"},
		{[]string{"zooms", "-minzoom", "-1"}, "-minzoom"},
		{[]string{"fidelity", "-maxzoom", "23"}, "-maxzoom"},
		{[]string{"fidelity", "-db-timeout", "0s"}, "-db-timeout"},
		{[]string{"zooms", "-db-timeout", "11m"}, "-db-timeout"},
		{[]string{"zooms", "-quiesce", "-1s"}, "-quiesce"},
		{[]string{"fidelity", "-quiesce", "31m"}, "-quiesce"},
		// Within bounds: on to the layer, which this configuration lacks.
		{[]string{"ceiling", "-duration", "1s", "-clients", "256", "-threads", "256", "-warm", "1000", "-warm-timeout", "10m"}, `layer "nope"`},
		{[]string{"ceiling", "-clients", "1"}, `layer "nope"`}, // -threads unset: 1, not its default 2
		{[]string{"fidelity", "-tiles", "2000", "-maxzoom", "0"}, `layer "nope"`},
		{[]string{"zooms", "-per-zoom", "256", "-minzoom", "22", "-maxzoom", "22"}, `layer "nope"`},
	} {
		err := runLoadtest(context.Background(), cfg, append(tc.args, "-layer", "nope"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("loadtest %s: error %v, want one naming %q", strings.Join(tc.args, " "), err, tc.err)
		}
	}
}

// zooms passes only when every tile was drawn or given up on at the
// server's own timeout: a refusal, or a 503 of the rate limiter, measured
// nothing of its tile.
func TestZoomsOutcome(t *testing.T) {
	row := func(z int, status map[int]int, timedOut int) loadtest.ZoomRow {
		n := 0
		for _, k := range status {
			n += k
		}
		return loadtest.ZoomRow{Zoom: z, Tiles: n, Status: status, TimedOut: timedOut}
	}
	for _, tc := range []struct {
		name string
		rows []loadtest.ZoomRow
		err  string // "" passes
	}{
		{"drawn", []loadtest.ZoomRow{row(10, map[int]int{200: 3, 204: 1}, 0)}, ""},
		{"drawn and timed out", []loadtest.ZoomRow{row(3, map[int]int{503: 2}, 2), row(4, map[int]int{200: 2}, 0)}, ""},
		{"only timed out", []loadtest.ZoomRow{row(0, map[int]int{503: 1}, 1)}, ""},
		{"no tile", nil, "no tile to ask for"},
		{"every tile refused", []loadtest.ZoomRow{row(10, map[int]int{401: 2}, 0)}, "drew no tile"},
		{"rate limiter unavailable", []loadtest.ZoomRow{row(10, map[int]int{503: 2}, 0)}, "drew no tile"},
		{"one refused", []loadtest.ZoomRow{row(10, map[int]int{200: 3}, 0), row(11, map[int]int{200: 2, 429: 1}, 0)}, "1 of 6 tiles"},
		{"one 503 of the limiter beside a timeout", []loadtest.ZoomRow{row(10, map[int]int{200: 3, 503: 2}, 1)}, "1 of 5 tiles"},
	} {
		err := zoomsOutcome(tc.rows, 10, 11)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// A zooms run in which the server refused some of the tiles it was asked
// for fails (exit 1, not a usage error) after printing its table, saying
// how many of all the tiles asked for were neither drawn nor given up on:
// the rows count every tile asked for, so the refused ones are failures.
func TestLoadtestZoomsFailsWhenSomeTilesAreRefused(t *testing.T) {
	prepareDemo(t)
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1)%2 == 0 { // every second tile refused
			problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 3})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	var out bytes.Buffer
	err := runLoadtest(t.Context(), cfg, []string{"zooms", "-url", srv.URL, "-layer", "places",
		"-minzoom", "10", "-maxzoom", "11", "-per-zoom", "2", "-quiesce", "0s"}, &out, io.Discard)
	m := regexp.MustCompile(`(\d+) of (\d+) tiles were neither drawn`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil || errors.As(err, new(usageError)) {
		t.Fatalf("loadtest zooms, every second tile refused: error %v, want one counting the tiles neither drawn (output:\n%s)", err, out.String())
	}
	failed, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	if n := int(asked.Load()); total != n || failed != n/2 || failed == 0 {
		t.Errorf("%d of %d tiles failed; the server was asked for %d and refused %d", failed, total, n, n/2)
	}
	if !strings.Contains(out.String(), "429×") {
		t.Errorf("the table does not show the refusals:\n%s", out.String())
	}
}

// A flag the scenario does not read is a usage error (exit 2) naming the
// flag and the scenario, not a run that silently ignores it: zooms -json
// wrote nothing and passed, ceiling -seed sampled nothing.
func TestLoadtestScenarioRefusesFlagsItDoesNotRead(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"zooms", "-json", filepath.Join(dir, "zooms.json")}, "-json"},
		{[]string{"zooms", "-tiles", "5"}, "-tiles"},
		{[]string{"zooms", "-warm", "5"}, "-warm"},
		{[]string{"fidelity", "-per-zoom", "3"}, "-per-zoom"},
		{[]string{"fidelity", "-duration", "5s"}, "-duration"},
		{[]string{"ceiling", "-seed", "2"}, "-seed"},
		{[]string{"ceiling", "-minzoom", "3"}, "-minzoom"},
		{[]string{"ceiling", "-db-time", "server"}, "-db-time"},
		{[]string{"ceiling", "-report", "a.json"}, "-report"},
		{[]string{"fidelity", "-report", "a.json", "-tiles", "5"}, "-tiles"},
	} {
		args := append([]string{"loadtest"}, tc.args...)
		out, err := runCommand(context.Background(), append(args, "-url", "http://127.0.0.1:1")...)
		msg := fmt.Sprint(err)
		if err == nil || !strings.HasPrefix(msg, "exit 2:") || !strings.Contains(msg, tc.flag+" ") || !strings.Contains(msg, "loadtest "+tc.args[0]+":") {
			t.Errorf("%s: error %v (stdout %q), want a usage error (exit 2) naming %s and the scenario", strings.Join(args, " "), err, out, tc.flag)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "zooms.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("zooms -json: %v, want no file", err)
	}
}

// Every flag of the scenarios says which of them read it.
func TestScenarioFlagsSayWhichScenariosReadThem(t *testing.T) {
	fs := flag.NewFlagSet("scenario", flag.ContinueOnError)
	(&scenarioFlags{}).flags(fs)
	fs.VisitAll(func(fl *flag.Flag) {
		use := scenarioFlagUse[fl.Name]
		if len(use) == 0 {
			t.Errorf("-%s: no scenario reads it", fl.Name)
		}
		for _, s := range use {
			if s != "fidelity" && s != "zooms" && s != "ceiling" {
				t.Errorf("-%s: read by %q, not a scenario", fl.Name, s)
			}
		}
	})
}

// -db-time server times the statements of the role the instrument reads as
// (DATABASE_URL: the server's read role), not always geotoll_reader: a
// server connecting as another role would otherwise measure nothing.
func TestServerTimerTimesTheReadRolesStatements(t *testing.T) {
	pcfg, err := pgxpool.ParseConfig("postgres://tiles_ro@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), pcfg) // lazy: nothing connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := &scenario{dbTime: "server"}
	cfg := DefaultConfig()
	cfg.Database.AdminURL = "postgres://admin@127.0.0.1:1/none"
	timer, done, err := s.timer(t.Context(), cfg, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	st, ok := timer.(loadtest.ServerTimer)
	if !ok || st.Role != "tiles_ro" {
		t.Errorf("timer %#v, want a ServerTimer of role tiles_ro", timer)
	}
}

// Against a server with its tile cache on (its default), fidelity and
// ceiling fail at the first tile the cache answered, naming the setting
// that turns it off: a second fidelity run priced every tile at a hit's
// base price and printed ρ NaN, and ceiling reported many times the
// database's ceiling, both exiting 0.
func TestLoadtestScenariosRefuseACachingServer(t *testing.T) {
	key := createKey(t, "bench")
	base, cfg := startServer(t, func(c *Config) {
		c.Throttle.Tiers["bench"] = TierConfig{Rate: 1e9, Capacity: 1e9}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fidelity := []string{"fidelity", "-tiles", "6", "-minzoom", "9", "-maxzoom", "12", "-url", base, "-key", key, "-layer", "places"}
	if err := runLoadtest(ctx, cfg, fidelity, io.Discard, io.Discard); err != nil {
		t.Fatalf("first fidelity run, every tile rendered: %v", err)
	}
	for _, args := range [][]string{
		fidelity,
		{"ceiling", "-duration", "1s", "-clients", "2", "-threads", "1", "-warm", "3", "-url", base, "-key", key, "-layer", "places"},
	} {
		var out bytes.Buffer
		err := runLoadtest(ctx, cfg, args, &out, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "X-Cache: HIT") || !strings.Contains(err.Error(), "tiles.cache.max_bytes 0") {
			t.Errorf("loadtest %s against a caching server: error %v, want one naming the cache hit and tiles.cache.max_bytes 0 (output:\n%s)", args[0], err, out.String())
		}
	}
}
