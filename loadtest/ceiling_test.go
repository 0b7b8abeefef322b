package loadtest

import (
	"context"
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
	}})
	if err != nil {
		t.Fatal(err)
	}
	return cat.Layer("places")
}

var berlin = orb.Point{13.405, 52.52}

func TestPgbenchScript(t *testing.T) {
	l := placesLayer(t)
	ts := []maptile.Tile{maptile.At(berlin, 14), maptile.At(berlin, 9), maptile.New(0, 0, 0)}
	s, err := PgbenchScript(l, ts)
	if err != nil {
		t.Fatal(err)
	}
	// Each envelope corner is a CASE over the tiles, with the very values
	// tiles.Store binds.
	for j, name := range pgbenchParams[:4] {
		m := regexp.MustCompile(`(?m)^\\set ` + name + ` CASE(.*) END$`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no \\set %s CASE … END in\n%s", name, s)
		}
		branches := regexp.MustCompile(`WHEN :k = (\d+) THEN (\S+)`).FindAllStringSubmatch(m[1], -1)
		if len(branches) != len(ts) {
			t.Fatalf("%s: %d branches, want %d", name, len(branches), len(ts))
		}
		for i, b := range branches {
			e := tiles.Envelope(ts[i])
			want := []float64{e.Min[0], e.Min[1], e.Max[0], e.Max[1]}[j]
			if k, _ := strconv.Atoi(b[1]); k != i {
				t.Fatalf("%s: branch %d is for k=%d", name, i, k)
			}
			if got, err := strconv.ParseFloat(b[2], 64); err != nil || got != want {
				t.Fatalf("%s of tile %d: %s, want %v", name, i, b[2], want)
			}
		}
	}
	for _, want := range []string{"\\set k random(0, 2)\n", "\\set extent 4096\n", "\\set buffer 64\n", "\\set maxf 20000\n",
		"\\startpipeline\nBEGIN READ ONLY;\nSELECT set_config('jit', 'off', true);\nSELECT set_config('statement_timeout', '1500', true);\n",
		";\nCOMMIT;\n\\endpipeline\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	// The query is the layer's own, comments aside, with :name for $n.
	start := strings.Index(s, "WITH env")
	end := strings.Index(s, ";\nCOMMIT;")
	got := s[start:end]
	for i := len(pgbenchParams); i >= 1; i-- {
		got = strings.ReplaceAll(got, ":"+pgbenchParams[i-1]+"::", "$"+strconv.Itoa(i)+"::")
	}
	var want []string
	for _, line := range strings.Split(l.SQL(), "\n") {
		if !strings.HasPrefix(line, "--") {
			want = append(want, line)
		}
	}
	if strings.TrimSpace(got) != strings.TrimSpace(strings.Join(want, "\n")) {
		t.Errorf("script query:\n%s\nlayer query:\n%s", got, strings.Join(want, "\n"))
	}
	if _, err := PgbenchScript(l, nil); err == nil {
		t.Error("a script without tiles was rendered")
	}
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
}
