package loadtest

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// placesLayer is the demo's points layer, as DefaultConfig serves it.
func placesLayer(t *testing.T) *tiles.Layer {
	t.Helper()
	cat, err := tiles.NewCatalog([]tiles.Layer{{
		Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857", SRID: 3857,
		Properties: []string{"name", "kind", "city", "rank"}, MaxFeatures: 20000, StatementTimeout: 1500 * time.Millisecond,
		GeometryKind: tiles.KindPoint, OrderBy: []string{"rank"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return cat.Layer("places")
}

var berlin = orb.Point{13.405, 52.52}

func TestPgbenchScript(t *testing.T) {
	l := placesLayer(t)
	// z14 runs the points query as stored; z9 and z0 cluster: two texts.
	ts := []maptile.Tile{maptile.At(berlin, 14), maptile.At(berlin, 9), maptile.New(0, 0, 0)}
	s, err := PgbenchScript(l, ts)
	if err != nil {
		t.Fatal(err)
	}
	// Every parameter is :pN with the very values tiles.Store binds: one
	// value when the tiles agree, else a CASE over them; the name is :layer.
	var args [][]any
	for _, tile := range ts {
		_, a := l.Query(tile)
		args = append(args, a)
	}
	for j := range args[0] {
		if _, isName := args[0][j].(string); isName {
			continue
		}
		name := "p" + strconv.Itoa(j+1)
		m := regexp.MustCompile(`(?m)^\\set ` + name + ` (.*)$`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no \\set %s in\n%s", name, s)
		}
		branches := regexp.MustCompile(`WHEN :k = (\d+) THEN (\S+)`).FindAllStringSubmatch(m[1], -1)
		for k, tile := range ts {
			got := m[1]
			if branches != nil {
				if len(branches) != len(ts) || branches[k][1] != strconv.Itoa(k) {
					t.Fatalf("%s: branches %v", name, branches)
				}
				got = branches[k][2]
			}
			if want := fmt.Sprint(args[k][j]); !sameNumber(got, want) {
				t.Errorf("%s of tile %v: %s, want %s", name, tile, got, want)
			}
		}
	}
	for _, want := range []string{"\\set k random(0, 2)\n", "\\if :k < 1\n", "\\else\n", "\\endif\n",
		"\\startpipeline\nBEGIN READ ONLY;\n" + tiles.ReadSettingsSQL + ";\nSELECT set_config('statement_timeout', '1500', true);\n",
		";\nCOMMIT;\n\\endpipeline\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	// Each branch's query is the layer's own for its zoom, comments aside,
	// with :pN for $N and :layer for the name.
	for i, z := range []maptile.Zoom{14, 9} {
		want := l.SQL(z)
		want = regexp.MustCompile(`(?m)^\s*--.*\n`).ReplaceAllString(want, "")
		want = regexp.MustCompile(`\$(\d+)\b`).ReplaceAllStringFunc(want, func(m string) string {
			if m == "$9" {
				return ":layer"
			}
			return ":p" + m[1:]
		})
		if !strings.Contains(s, strings.TrimRight(want, "\n; ")+";\nCOMMIT;") {
			t.Errorf("branch %d lacks the layer's z%d query", i, z)
		}
	}
	if _, err := PgbenchScript(l, nil); err == nil {
		t.Error("a script without tiles was rendered")
	}
}

// sameNumber compares a pgbench literal with a Go value's text.
func sameNumber(a, b string) bool {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	return errA == nil && errB == nil && x == y
}

func TestTileTimerAndAnchorsAgainstPostGIS(t *testing.T) {
	pool := testenv.ReadPool(t)
	l := placesLayer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := Anchors(ctx, pool, l, 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Anchors(ctx, pool, l, 20, 5)
	if len(a) != 20 || len(b) != 20 {
		t.Fatalf("%d and %d anchors, want 20", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] || math.Abs(a[i][0]) > 180 || math.Abs(a[i][1]) > 85 {
			t.Fatalf("anchor %d: %v then %v: not deterministic or not lon/lat", i, a[i], b[i])
		}
	}
	store := tiles.NewStore(pool)
	tt := TileTimer{Pool: pool, Runs: 3, Timeout: 5 * time.Second, Quiesce: time.Second}
	for _, tl := range []maptile.Tile{maptile.At(berlin, 12), maptile.At(a[0], 9), maptile.At(berlin, 6)} {
		tm, err := tt.Time(ctx, l, tl)
		if err != nil {
			t.Fatal(err)
		}
		want, err := store.Tile(ctx, []*tiles.Layer{l}, tl)
		if err != nil {
			t.Fatal(err)
		}
		if tm.MS <= 0 || tm.Censored || tm.Bytes == 0 || tm.Bytes != len(want) {
			t.Errorf("tile %v: timing %+v, the server's store drew %d bytes", tl, tm, len(want))
		}
	}
	// A timeout is a censored timing, not an error.
	tm, err := TileTimer{Pool: pool, Runs: 3, Timeout: time.Millisecond}.Time(ctx, l, maptile.New(0, 0, 0))
	if err != nil || !tm.Censored {
		t.Errorf("1 ms timeout on the world tile: %+v, %v; want censored", tm, err)
	}
}

func TestPgbenchAgainstPostGIS(t *testing.T) {
	pool := testenv.ReadPool(t)
	l := placesLayer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pts, err := Centroids(ctx, pool, l)
	if err != nil || len(pts) == 0 {
		t.Fatalf("%d centroids, %v", len(pts), err)
	}
	lists := CeilingLists(pts)
	script, err := PgbenchScript(l, lists[0].Tiles[:20])
	if err != nil {
		t.Fatal(err)
	}
	p := Pgbench{DatabaseURL: testenv.ReadDatabaseURL(t), Clients: 2, Threads: 1, Duration: time.Second, Dir: t.TempDir()}
	tps, out, err := p.Run(ctx, script, l.Name)
	if err != nil {
		t.Fatal(err)
	}
	if tps <= 0 || !strings.Contains(out, "number of failed transactions: 0 ") || !strings.Contains(out, "query mode: prepared") {
		t.Fatalf("tps %v from:\n%s", tps, out)
	}
	p.Transactions = 5 // per client, instead of a duration
	if tps, out, err = p.Run(ctx, script, l.Name); err != nil || tps <= 0 || !strings.Contains(out, "number of transactions actually processed: 10/10\n") {
		t.Fatalf("2 clients × 5 transactions: tps %v, %v from:\n%s", tps, err, out)
	}
	// Exec answers the count and pgbench's own CPU time (it spent some
	// on connecting, if nothing else) as well.
	if r, err := p.Exec(ctx, script, l.Name); err != nil || r.Transactions != 10 || r.TPS <= 0 || r.CPU <= 0 {
		t.Fatalf("2 clients × 5 transactions: %d transactions, tps %v, CPU %v, %v from:\n%s", r.Transactions, r.TPS, r.CPU, err, r.Output)
	}
	// The steady rate, from the run's transaction logs: each client's
	// first 3 left out. Two threads write two logs, one client each:
	// steadyRate fails unless it reads both.
	p.Transactions, p.Steady, p.Threads = 40, 3, 2
	if tps, out, err = p.Run(ctx, script, l.Name); err != nil || tps <= 0 {
		t.Fatalf("steady rate of 2 clients × 40 transactions: tps %v, %v from:\n%s", tps, err, out)
	}
	p.Steady = 40 // every transaction skipped: an error, not a rate
	if _, out, err = p.Run(ctx, script, l.Name); err == nil || !strings.Contains(err.Error(), "not more than the 40 skipped") {
		t.Fatalf("steady rate with every transaction skipped: %v, want an error, from:\n%s", err, out)
	}
	p.Transactions, p.Steady, p.Threads = 5, 0, 1

	// The unsent script runs the same statements, the tile query wrapped
	// to answer its tile's length (UnsentQuery, checked against the tiles
	// themselves by TestUnsentQueryAnswersTheTilesLength).
	unsent, err := PgbenchUnsentScript(l, lists[0].Tiles[:20])
	if err != nil {
		t.Fatal(err)
	}
	const wrap = "SELECT length(t.mvt), t.level FROM (\n"
	if n := strings.Count(unsent, wrap); n != strings.Count(script, "\\startpipeline") || n == 0 {
		t.Fatalf("%d tile queries wrapped, for %d pipelines:\n%s", n, strings.Count(script, "\\startpipeline"), unsent)
	}
	if strip := strings.NewReplacer(wrap, "", "\n) AS t(mvt, level);", ";").Replace(unsent); strip != script {
		t.Fatalf("the unsent script is not the script with its tile queries wrapped:\n%s\nagainst\n%s", unsent, script)
	}
	if tps, out, err = p.Run(ctx, unsent, l.Name); err != nil || tps <= 0 || !strings.Contains(out, "number of transactions actually processed: 10/10\n") {
		t.Fatalf("the unsent script, 2 clients × 5 transactions: tps %v, %v from:\n%s", tps, err, out)
	}
}

// TestPgbenchTransactions reads the count of transactions pgbench
// processed from its output, -t's "n/n" and -T's "n" alike.
func TestPgbenchTransactions(t *testing.T) {
	for _, c := range []struct {
		out  string
		want int
		ok   bool
	}{
		{"transaction type: t.pgbench\nnumber of transactions actually processed: 10/10\nnumber of failed transactions: 0 (0.000%)\n", 10, true},
		{"duration: 10 s\nnumber of transactions actually processed: 12345\n", 12345, true},
		{"number of transactions actually processed: 0/10\n", 0, true},
		{"number of transactions per client: 5\n", 0, false},
		{"number of transactions actually processed: 99999999999999999999\n", 0, false},
		{"", 0, false},
	} {
		n, err := pgbenchTransactions(c.out)
		if (err == nil) != c.ok || n != c.want {
			t.Errorf("pgbenchTransactions(%q) = %d, %v; want %d (ok %v)", c.out, n, err, c.want, c.ok)
		}
	}
}

// TestUnsentQueryAnswersTheTilesLength runs tile queries of both templates
// — points (as stored and clustered) and polygons (as stored and
// generalised) — as they are and wrapped by UnsentQuery, with the same
// arguments: the wrapped one answers the very tile's length and level.
func TestUnsentQueryAnswersTheTilesLength(t *testing.T) {
	pool := testenv.ReadPool(t)
	cat, err := tiles.NewCatalog([]tiles.Layer{{
		Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857", SRID: 3857,
		Properties: []string{"name", "kind", "city", "rank"}, MaxFeatures: 20000, StatementTimeout: 5 * time.Second,
		GeometryKind: tiles.KindPoint, OrderBy: []string{"rank"},
	}, {
		Name: "districts", Table: "geotoll.districts", GeometryColumn: "geom_3857", SRID: 3857,
		IDColumn: "id", Properties: []string{"name", "city", "population"}, StatementTimeout: 5 * time.Second,
		GeometryKind: tiles.KindPolygon, OrderBy: []string{"population desc"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	texts := map[string]bool{}
	for _, name := range []string{"places", "districts"} {
		l := cat.Layer(name)
		for _, z := range []maptile.Zoom{3, 9, 12, 14} {
			tile := maptile.At(berlin, z)
			sql, args := l.Query(tile)
			texts[sql] = true
			var want []byte
			var level int
			if err := pool.QueryRow(ctx, sql, args...).Scan(&want, &level); err != nil {
				t.Fatalf("%s %v: %v", name, tile, err)
			}
			var n, unsentLevel int
			if err := pool.QueryRow(ctx, UnsentQuery(sql), args...).Scan(&n, &unsentLevel); err != nil {
				t.Fatalf("%s %v, wrapped: %v", name, tile, err)
			}
			if n != len(want) || unsentLevel != level || n == 0 {
				t.Errorf("%s %v: wrapped answers %d bytes at level %d; the tile is %d bytes at level %d", name, tile, n, unsentLevel, len(want), level)
			}
		}
	}
	if len(texts) < 3 {
		t.Fatalf("%d query texts: the test covers fewer shapes of the query than it says", len(texts))
	}
}

// TestWriteCeilingCPU: each run's CPU a tile — the client pgbench or this
// process, the rest what no process counted had — a run of no tiles
// without figures, why a run has none, and whether the database was seen
// here; no table when nothing was read.
func TestWriteCeilingCPU(t *testing.T) {
	rs := []CeilingResult{{List: "z14", Tiles: 396, PgbenchTPS: 1000, UnsentTPS: 1200,
		Loops: []LoopResult{{Encoding: "identity", Requests: 2000, OK: 2000, TilesPerSec: 800}},
		CPU: []RunCPU{
			{Run: "pgbench", Tiles: 1000, Pgbench: 200 * time.Millisecond, CPUTimes: CPUTimes{PostgresHere: true,
				Busy: 2 * time.Second, Postgres: 1700 * time.Millisecond, Redis: 10 * time.Millisecond, Switches: 5000}},
			{Run: "identity", Tiles: 2000, CPUTimes: CPUTimes{PostgresHere: true, Busy: 5 * time.Second, Postgres: 3400 * time.Millisecond,
				Redis: 200 * time.Millisecond, Geotoll: time.Second, Self: 300 * time.Millisecond, Steal: 20 * time.Millisecond, Switches: 36000}},
			{Run: "gzip", CPUTimes: CPUTimes{PostgresHere: true, Busy: time.Second}},
		},
		CPUErr: errUnsettled}}
	var b strings.Builder
	WriteCeiling(&b, "places", 4, 0, time.Second, rs)
	out := b.String()
	for _, row := range [][]string{
		{"z14", "pgbench", "1000", "2000", "1700", "10", "0", "200", "90", "0", "5.0"},
		{"z14", "identity", "2000", "2500", "1700", "100", "500", "150", "50", "10", "18.0"},
		{"z14", "gzip", "0", "–", "–", "–", "–", "–", "–", "–", "–"},
	} {
		if !regexp.MustCompile(`(?m)^\s*` + strings.Join(row, `\s+`) + `\s*$`).MatchString(out) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
	for _, want := range []string{"list z14: not read for every run: " + errUnsettled.Error(), "CPU outside the database is CPU it does not get"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	for i := range rs[0].CPU {
		rs[0].CPU[i].PostgresHere = false
	}
	b.Reset()
	WriteCeiling(&b, "places", 4, 0, time.Second, rs)
	if !strings.Contains(b.String(), "No process named postgres was seen on this host") {
		t.Errorf("no word of the database running elsewhere in:\n%s", b.String())
	}
	rs[0].CPU, rs[0].CPUErr = nil, nil
	b.Reset()
	WriteCeiling(&b, "places", 4, 0, time.Second, rs)
	if strings.Contains(b.String(), "this host's CPU") {
		t.Errorf("a CPU table with nothing read:\n%s", b.String())
	}
}

// pgbench's command line, which every user of the host can read (ps,
// /proc/PID/cmdline), holds no password: the database URL's goes to the
// child's environment, and the rest of the URL stays on the command line.
func TestPgbenchCommandKeepsThePasswordOffItsCommandLine(t *testing.T) {
	const secret = "s3cret pass'word\\"
	for _, c := range []struct {
		url, conninfo, password string
	}{
		{"postgres://reader:s3cret%20pass%27word%5C@127.0.0.1:5432/geotoll?sslmode=disable",
			"postgres://reader@127.0.0.1:5432/geotoll?sslmode=disable", secret},
		{"postgresql://reader@db.example/geotoll?password=s3cret+pass%27word%5C&sslmode=require&application_name=bench",
			"postgresql://reader@db.example/geotoll?application_name=bench&sslmode=require", secret},
		{`host=127.0.0.1 port = 5432 user=reader password='s3cret pass\'word\\' dbname=geotoll`,
			`host='127.0.0.1' port='5432' user='reader' dbname='geotoll'`, secret},
		{`dbname=geotoll password=s3cret\ pass\'word\\ sslmode=disable`, `dbname='geotoll' sslmode='disable'`, secret},
		{"postgres://reader@127.0.0.1/geotoll", "postgres://reader@127.0.0.1/geotoll", ""},
		{"dbname=geotoll", "dbname='geotoll'", ""},
		{`dbname=geotoll\`, "dbname='geotoll'", ""},
		{"geotoll", "geotoll", ""},
		{"", "", ""},
	} {
		cmd, err := Pgbench{Path: "pgbench", DatabaseURL: c.url}.command(context.Background(), []string{"-n", "-f", "x.pgbench"})
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		want := []string{"pgbench", "-n", "-f", "x.pgbench"}
		if c.conninfo != "" {
			want = append(want, c.conninfo)
		}
		if fmt.Sprint(cmd.Args) != fmt.Sprint(want) {
			t.Errorf("%s: args %q, want %q", c.url, cmd.Args, want)
		}
		for _, a := range cmd.Args {
			if strings.Contains(a, "s3cret") {
				t.Errorf("%s: the password on the command line: %q", c.url, cmd.Args)
			}
		}
		var env []string
		for _, e := range cmd.Env {
			if strings.HasPrefix(e, "PGPASSWORD=") {
				env = append(env, e)
			}
		}
		switch {
		case c.password == "" && cmd.Env != nil:
			t.Errorf("%s: no password, yet an environment of its own", c.url)
		case c.password != "" && (len(env) == 0 || env[len(env)-1] != "PGPASSWORD="+c.password):
			t.Errorf("%s: PGPASSWORD %q, want %q", c.url, env, c.password)
		case c.password != "" && len(cmd.Env) <= len(env):
			t.Errorf("%s: the child's environment is only %q, not this process's with PGPASSWORD", c.url, cmd.Env)
		}
	}
	for _, bad := range []string{
		"postgres://reader@127.0.0.1/geotoll?sslpassword=keypass", "dbname=geotoll sslpassword=keypass",
		"dbname='geotoll", `dbname='geotoll\'`, "=geotoll", "hunter2 user=reader", "postgres://reader:pw@[::1/geotoll",
	} {
		if cmd, err := (Pgbench{DatabaseURL: bad}).command(context.Background(), nil); err == nil {
			t.Errorf("%s: %q, want an error", bad, cmd.Args)
		} else if strings.Contains(err.Error(), "keypass") || strings.Contains(err.Error(), "pw@") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error quotes the secret: %v", bad, err)
		}
	}
}
