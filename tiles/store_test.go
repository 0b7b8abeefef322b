package tiles_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

var (
	berlin = orb.Point{13.405, 52.52}
	europe = orb.Point{10, 50}
	ocean  = orb.Point{0, 0} // Null Island: no seeded city nearby
)

// TestEnvelopeMatchesPostGIS compares Envelope with ST_TileEnvelope for the
// corner tiles of every zoom and ~300 random tiles, in one query.
func TestEnvelopeMatchesPostGIS(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	rng := mrand.New(mrand.NewPCG(2026, 22))
	var cases []maptile.Tile
	for z := maptile.Zoom(0); z <= tiles.MaxZoom; z++ {
		n := uint32(1) << z
		cases = append(cases, maptile.New(0, 0, z), maptile.New(n-1, n-1, z), maptile.New(0, n-1, z), maptile.New(n-1, 0, z))
	}
	for range 300 {
		z := maptile.Zoom(rng.IntN(int(tiles.MaxZoom) + 1))
		n := uint32(1) << z
		cases = append(cases, maptile.New(rng.Uint32N(n), rng.Uint32N(n), z))
	}
	zs, xs, ys := make([]int32, len(cases)), make([]int32, len(cases)), make([]int32, len(cases))
	for i, c := range cases {
		zs[i], xs[i], ys[i] = int32(c.Z), int32(c.X), int32(c.Y)
	}
	rows, err := pool.Query(t.Context(), `
		SELECT ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e)
		FROM unnest($1::int[], $2::int[], $3::int[]) WITH ORDINALITY AS u(z, x, y, i),
		     ST_TileEnvelope(u.z, u.x, u.y) AS e
		ORDER BY u.i`, zs, xs, ys)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (orb.Bound, error) {
		var b orb.Bound
		err := row.Scan(&b.Min[0], &b.Min[1], &b.Max[0], &b.Max[1])
		return b, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(cases) {
		t.Fatalf("PostGIS returned %d envelopes for %d tiles", len(want), len(cases))
	}
	exact := 0
	for i, tile := range cases {
		got := tiles.Envelope(tile)
		if got == want[i] {
			exact++
		}
		for j, pair := range [][2]float64{
			{got.Min[0], want[i].Min[0]}, {got.Min[1], want[i].Min[1]},
			{got.Max[0], want[i].Max[0]}, {got.Max[1], want[i].Max[1]},
		} {
			if d := math.Abs(pair[0] - pair[1]); d > 1e-6 {
				t.Errorf("Envelope(%v) coordinate %d = %.9f, ST_TileEnvelope %.9f (off by %g m)", tile, j, pair[0], pair[1], d)
			}
		}
	}
	t.Logf("%d of %d envelopes equal ST_TileEnvelope bit for bit", exact, len(cases))
}

// demoCatalog is the demo catalog with extra layers.
func demoCatalog(t testing.TB, extra ...tiles.Layer) *tiles.Catalog {
	t.Helper()
	return newCatalog(t, append(demoLayers(), extra...)...)
}

func resolve(t testing.TB, c *tiles.Catalog, list string) []*tiles.Layer {
	t.Helper()
	ls, err := c.Resolve(list)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", list, err)
	}
	return ls
}

// render runs Store.Tile and decodes the result.
func render(t *testing.T, s *tiles.Store, layers []*tiles.Layer, tile maptile.Tile) ([]byte, mvt.Layers) {
	t.Helper()
	raw, err := s.Tile(t.Context(), layers, tile)
	if err != nil {
		t.Fatalf("Tile(%v, %v): %v", layerNames(layers), tile, err)
	}
	decoded, err := mvt.Unmarshal(raw)
	if err != nil {
		t.Fatalf("Tile(%v, %v): %d bytes do not decode as MVT: %v", layerNames(layers), tile, len(raw), err)
	}
	return raw, decoded
}

func mvtNames(ls mvt.Layers) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

func TestStoreTilePoints(t *testing.T) {
	t.Parallel()
	store := tiles.NewStore(testenv.ReadPool(t))
	cat := demoCatalog(t)
	tile := maptile.At(berlin, 14)
	_, decoded := render(t, store, resolve(t, cat, "places"), tile)

	if got := mvtNames(decoded); !slices.Equal(got, []string{"places"}) {
		t.Fatalf("layers = %v, want [places]", got)
	}
	layer := decoded[0]
	if layer.Extent != tiles.DefaultExtent || layer.Version != 2 {
		t.Errorf("extent %d version %d, want %d and 2", layer.Extent, layer.Version, tiles.DefaultExtent)
	}
	if len(layer.Features) == 0 {
		t.Fatalf("no features in %v over Berlin", tile)
	}

	// Every point lies within the tile expanded by the buffer (plus one
	// tile unit: ST_AsMVTGeom rounds to the grid, and orb's projection back
	// reads a unit as its centre).
	places := cat.Layer("places")
	bound := tile.Bound(float64(places.Buffer+1) / float64(places.Extent))
	inner := tile.Bound()
	decoded.ProjectToWGS84(tile)
	ids := map[any]bool{}
	inside := 0
	for _, f := range layer.Features {
		p, ok := f.Geometry.(orb.Point)
		if !ok {
			t.Fatalf("feature %v is a %T, want orb.Point", f.ID, f.Geometry)
		}
		if !bound.Contains(p) {
			t.Errorf("feature %v at %v lies outside the buffered tile %v", f.ID, p, bound)
		}
		if inner.Contains(p) {
			inside++
		}
		// The allowlisted four, and point_count (1 beyond the clustered
		// zooms).
		for _, k := range []string{"name", "kind", "city", "rank", "point_count"} {
			if _, ok := f.Properties[k]; !ok {
				t.Errorf("feature %v lacks property %q: %v", f.ID, k, f.Properties)
			}
		}
		if len(f.Properties) != 5 || f.Properties["point_count"] != 1.0 {
			t.Errorf("feature %v has properties %v, want only the allowlisted four and point_count 1", f.ID, f.Properties)
		}
		if f.ID == nil || ids[f.ID] {
			t.Errorf("feature id %v missing or repeated", f.ID)
		}
		ids[f.ID] = true
	}
	if inside == 0 {
		t.Errorf("none of %d features lies inside the tile proper", len(layer.Features))
	}

	// Nothing lost: the tile holds every place inside its envelope, and no
	// more than those inside the buffered envelope.
	owner := testenv.Pool(t)
	env := tiles.Envelope(tile)
	var strict, buffered int
	width := env.Max[0] - env.Min[0]
	err := owner.QueryRow(t.Context(), `
		SELECT count(*) FILTER (WHERE ST_Intersects(geom_3857, ST_MakeEnvelope($1, $2, $3, $4, 3857))),
		       count(*)
		FROM geotoll.places
		WHERE geom_3857 && ST_Expand(ST_MakeEnvelope($1, $2, $3, $4, 3857), $5::float8)`,
		env.Min[0], env.Min[1], env.Max[0], env.Max[1], width*float64(places.Buffer+1)/float64(places.Extent),
	).Scan(&strict, &buffered)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(layer.Features); n < strict || n > buffered {
		t.Errorf("%d features, want between %d (inside the tile) and %d (inside the buffer)", n, strict, buffered)
	}
	t.Logf("%v: %d features (%d inside the tile, %d within the buffer)", tile, len(layer.Features), strict, buffered)
}

func TestStoreTileComposite(t *testing.T) {
	t.Parallel()
	store := tiles.NewStore(testenv.ReadPool(t))
	cat := demoCatalog(t)
	tile := maptile.At(berlin, 12)
	for _, tc := range []struct {
		name string
		list string
		want []string
	}{
		{name: "places first", list: "places,districts", want: []string{"places", "districts"}},
		{name: "districts first", list: "districts,places", want: []string{"districts", "places"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, decoded := render(t, store, resolve(t, cat, tc.list), tile)
			if got := mvtNames(decoded); !slices.Equal(got, tc.want) {
				t.Fatalf("layers = %v, want %v", got, tc.want)
			}
			for _, l := range decoded {
				if len(l.Features) == 0 {
					t.Errorf("layer %q has no features over Berlin at z12", l.Name)
				}
			}
			decoded.ProjectToWGS84(tile)
			for _, f := range decoded[slices.Index(tc.want, "districts")].Features {
				if _, ok := f.Geometry.(orb.Polygon); !ok {
					if _, ok := f.Geometry.(orb.MultiPolygon); !ok {
						t.Errorf("district %v is a %T, want a polygon", f.ID, f.Geometry)
					}
				}
			}
		})
	}
}

func TestStoreTileEmpty(t *testing.T) {
	t.Parallel()
	store := tiles.NewStore(testenv.ReadPool(t))
	cat := demoCatalog(t)
	for _, tc := range []struct {
		name string
		list string
		tile maptile.Tile
	}{
		{name: "ocean", list: "places", tile: maptile.At(ocean, 14)},
		{name: "ocean composite", list: "places,districts,geofences", tile: maptile.At(ocean, 14)},
		{name: "deepest zoom", list: "places", tile: maptile.At(ocean, tiles.MaxZoom)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := store.Tile(t.Context(), resolve(t, cat, tc.list), tc.tile)
			if err != nil {
				t.Fatalf("Tile: %v", err)
			}
			if len(raw) != 0 {
				t.Errorf("empty tile %v is %d bytes, want 0 (served as 204)", tc.tile, len(raw))
			}
		})
	}
}

func TestStoreTileFeatureCap(t *testing.T) {
	t.Parallel()
	store := tiles.NewStore(testenv.ReadPool(t))
	capped := demoLayers()[0]
	capped.Name, capped.MaxFeatures = "places_capped", 5
	cat := demoCatalog(t, capped)
	tile := maptile.At(europe, 4)
	for _, tc := range []struct {
		name     string
		list     string
		min, max int
	}{
		{name: "capped", list: "places_capped", min: 1, max: 5},
		// The same tile without the cap has more: the cap is what limits it.
		{name: "uncapped", list: "places", min: 6, max: cat.Layer("places").MaxFeatures},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, decoded := render(t, store, resolve(t, cat, tc.list), tile)
			if len(decoded) != 1 {
				t.Fatalf("layers = %v", mvtNames(decoded))
			}
			if n := len(decoded[0].Features); n < tc.min || n > tc.max {
				t.Errorf("%d features in %v, want %d..%d", n, tile, tc.min, tc.max)
			}
		})
	}
}

// TestStoreTileTransformedLayer serves the places from their EPSG:4326
// column: the transform path must draw the same features as the 3857 one.
func TestStoreTileTransformedLayer(t *testing.T) {
	t.Parallel()
	store := tiles.NewStore(testenv.ReadPool(t))
	wgs := demoLayers()[0]
	wgs.Name, wgs.GeometryColumn, wgs.SRID = "places_4326", "geom", 4326
	cat := demoCatalog(t, wgs)
	tile := maptile.At(berlin, 14)
	_, merc := render(t, store, resolve(t, cat, "places"), tile)
	_, geo := render(t, store, resolve(t, cat, "places_4326"), tile)
	if len(merc) != 1 || len(geo) != 1 || len(merc[0].Features) == 0 {
		t.Fatalf("layers: %v and %v", mvtNames(merc), mvtNames(geo))
	}
	points := func(l *mvt.Layer) map[any]orb.Point {
		m := map[any]orb.Point{}
		for _, f := range l.Features {
			m[f.ID] = f.Geometry.(orb.Point)
		}
		return m
	}
	a, b := points(merc[0]), points(geo[0])
	if len(a) != len(b) {
		t.Errorf("3857 layer has %d features, 4326 layer %d", len(a), len(b))
	}
	for id, p := range a {
		q, ok := b[id]
		if !ok {
			t.Errorf("feature %v missing from the 4326 layer", id)
			continue
		}
		if math.Abs(p[0]-q[0]) > 1 || math.Abs(p[1]-q[1]) > 1 {
			t.Errorf("feature %v at %v in 3857, %v in 4326 (tile units)", id, p, q)
		}
	}
}

// fixture is a schema of its own for one test, readable by the read role
// and dropped when the test ends.
type fixture struct {
	owner  *pgxpool.Pool
	schema string // unquoted, unique: also a marker to find queries in pg_stat_activity
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	owner := testenv.Pool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	f := &fixture{owner: owner, schema: "tiles_test_" + hex.EncodeToString(b[:])}
	schema := pgx.Identifier{f.schema}.Sanitize()
	f.exec(t, "CREATE SCHEMA "+schema)
	t.Cleanup(func() {
		// t.Context() is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := owner.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop fixture schema: %v", err)
		}
	})
	f.exec(t, "GRANT USAGE ON SCHEMA "+schema+" TO geotoll_reader")
	return f
}

// exec runs statements with {s} standing for the quoted schema.
func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	q := pgx.Identifier{f.schema}.Sanitize()
	sql = strings.ReplaceAll(sql, "{s}", q)
	if _, err := f.owner.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("fixture %q: %v", sql, err)
	}
}

// slowView creates {s}.src with rows points near (0, 0) and the view
// {s}.slow over it, which sleeps perSleep seconds for every row it yields.
func (f *fixture) slowView(t *testing.T, rows int, perSleep float64) {
	t.Helper()
	f.exec(t, `CREATE TABLE {s}.src (id bigint PRIMARY KEY, geom geometry(Point, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.src SELECT g, ST_SetSRID(ST_MakePoint(g * 1000, g * 1000), 3857) FROM generate_series(1, $1::int) g`, rows)
	// The lateral subquery refers to s, so it runs (and sleeps) once per row.
	f.exec(t, fmt.Sprintf(`CREATE VIEW {s}.slow AS
		SELECT s.id, s.geom FROM {s}.src s, LATERAL (SELECT pg_sleep(%g) WHERE s.id IS NOT NULL) z`, perSleep))
	f.exec(t, `GRANT SELECT ON {s}.slow TO geotoll_reader`)
}

func (f *fixture) table(name string) string { return f.schema + "." + name }

// activeBackends counts other backends running a query that mentions the
// fixture's schema.
func (f *fixture) activeBackends(ctx context.Context) (int, error) {
	var n int
	err := f.owner.QueryRow(ctx, `
		SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0`, f.schema).Scan(&n)
	return n, err
}

// waitBackends polls pg_stat_activity until cond holds for the number of
// active backends, for at most 5 s.
func (f *fixture) waitBackends(t *testing.T, what string, cond func(int) bool) {
	t.Helper()
	f.waitBackendsFor(t, 5*time.Second, what, cond)
}

// waitBackendsFor is waitBackends for at most limit.
func (f *fixture) waitBackendsFor(t *testing.T, limit time.Duration, what string, cond func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		n, err := f.activeBackends(t.Context())
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if cond(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d backends still run the fixture's query; want %s", limit, n, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStoreStatementTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// 4 rows × 0.3 s: 1.2 s, under the read role's own 5 s
	// statement_timeout, so a cancel can only come from the layer's 100 ms.
	f.slowView(t, 4, 0.3)
	cat := newCatalog(t,
		tiles.Layer{Name: "slow", Table: f.table("slow"), GeometryColumn: "geom", StatementTimeout: 100 * time.Millisecond},
		tiles.Layer{Name: "patient", Table: f.table("slow"), GeometryColumn: "geom", StatementTimeout: 10 * time.Second},
	)
	// One connection: the renders after a timeout must get a usable one,
	// not the connection the failed transaction left behind.
	cfg, err := pgxpool.ParseConfig(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := tiles.NewStore(pool)
	store.RetryAfter = 7
	world := maptile.New(0, 0, 0)

	_, err = store.Tile(t.Context(), resolve(t, cat, "slow"), world)
	p := problem.From(err)
	if err == nil || p.Code != problem.Timeout {
		t.Fatalf("Tile over a slow view: %v, want a %q problem", err, problem.Timeout)
	}
	if problem.Status(p.Code) != http.StatusServiceUnavailable || p.RetryAfter != 7 {
		t.Errorf("status %d Retry-After %d, want 503 and 7", problem.Status(p.Code), p.RetryAfter)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Errorf("cause %v, want SQLSTATE 57014", err)
	}
	f.waitBackends(t, "none", func(n int) bool { return n == 0 })

	// In a composite tile each layer keeps its own timeout: a patient layer
	// alongside does not lend the slow one its slack, in either order.
	for _, list := range []string{"slow,patient", "patient,slow"} {
		_, err := store.Tile(context.Background(), resolve(t, cat, list), world)
		if p := problem.From(err); p.Code != problem.Timeout {
			t.Errorf("composite %s: %v, want the slow layer's own timeout (503)", list, err)
		}
	}
	f.waitBackends(t, "none", func(n int) bool { return n == 0 })
	_, decoded := render(t, store, resolve(t, cat, "patient"), world)
	if got := mvtNames(decoded); !slices.Equal(got, []string{"patient"}) || len(decoded[0].Features) != 4 {
		t.Errorf("patient alone: layers %v, want 4 features", got)
	}
}

// TestStoreSessionSettings reads back, through a view, the settings the
// Store's transaction runs with. It uses the owner pool, whose defaults are
// read-write with JIT on, so each setting is the Store's doing.
func TestStoreSessionSettings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE VIEW {s}.settings AS
		SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(1, 1), 3857) AS geom,
		       current_setting('statement_timeout') AS statement_timeout,
		       current_setting('jit') AS jit,
		       current_setting('transaction_read_only') AS read_only`)
	cat := newCatalog(t,
		tiles.Layer{Name: "a", Table: f.table("settings"), GeometryColumn: "geom",
			Properties: []string{"statement_timeout", "jit", "read_only"}, StatementTimeout: 1500 * time.Millisecond},
		tiles.Layer{Name: "b", Table: f.table("settings"), GeometryColumn: "geom", StatementTimeout: 250 * time.Millisecond},
	)
	// One connection, so the check below sees the one the tile used.
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, decoded := render(t, tiles.NewStore(pool), resolve(t, cat, "b,a"), maptile.New(0, 0, 0))
	if len(decoded) != 2 || len(decoded[1].Features) != 1 {
		t.Fatalf("layers %v", mvtNames(decoded))
	}
	got := decoded[1].Features[0].Properties
	want := map[string]any{"statement_timeout": "1500ms", "jit": "off", "read_only": "on"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}

	// The settings were local to the transaction.
	var jit, timeout string
	err = pool.QueryRow(t.Context(), "SELECT current_setting('jit'), current_setting('statement_timeout')").Scan(&jit, &timeout)
	if err != nil || jit == "off" || timeout == "1500ms" {
		t.Errorf("after the tile, jit = %q and statement_timeout = %q (%v): settings leaked into the pool", jit, timeout, err)
	}
}

// TestStoreReadOnly: a layer whose rows come from a function that writes
// fails inside the Store's READ ONLY transaction, even as the owner.
func TestStoreReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.written (n int)`)
	f.exec(t, `CREATE FUNCTION {s}.write() RETURNS boolean LANGUAGE sql VOLATILE
		AS 'INSERT INTO `+pgx.Identifier{f.schema, "written"}.Sanitize()+` VALUES (1) RETURNING true'`)
	f.exec(t, `CREATE VIEW {s}.writer AS
		SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(1, 1), 3857) AS geom WHERE {s}.write()`)
	cat := newCatalog(t, tiles.Layer{Name: "writer", Table: f.table("writer"), GeometryColumn: "geom"})
	_, err := tiles.NewStore(f.owner).Tile(t.Context(), resolve(t, cat, "writer"), maptile.New(0, 0, 0))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("Tile over a writing view: %v, want SQLSTATE 25006 (read_only_sql_transaction)", err)
	}
	if p := problem.From(err); p.Code != problem.Internal {
		t.Errorf("code %q, want %q", p.Code, problem.Internal)
	}
	var n int
	if err := f.owner.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{f.schema, "written"}.Sanitize()).Scan(&n); err != nil || n != 0 {
		t.Errorf("written has %d rows (%v), want 0", n, err)
	}
}

// TestStoreHostileTableIsOneIdentifier: PostgreSQL reads a hostile table
// name from the configuration as one (missing) relation, not as SQL; the
// tile answers 503 naming the layer (the server's start-up check refuses
// such a layer before it is ever served).
func TestStoreHostileTableIsOneIdentifier(t *testing.T) {
	t.Parallel()
	cat := newCatalog(t, tiles.Layer{
		Name: "hostile", Table: `geotoll.places"; DROP TABLE x; --`, GeometryColumn: "geom_3857",
	})
	_, err := tiles.NewStore(testenv.ReadPool(t)).Tile(t.Context(), resolve(t, cat, "hostile"), maptile.New(0, 0, 0))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("Tile: %v, want SQLSTATE 42P01 (undefined_table)", err)
	}
	if p := problem.From(err); p.Code != problem.Unavailable || !strings.HasPrefix(p.Detail, `layer "hostile" does not match the database: relation`) {
		t.Errorf("code %q, detail %q; want %q naming the layer", p.Code, p.Detail, problem.Unavailable)
	}
}

// A geometry column that declares no SRID passes the layer checks (they
// read no rows) and may hold a row in no SRID or another than the
// layer's: its tile answers 503 naming the layer, as any statement that
// does not fit the database does, where PostGIS's refusal (internal_error)
// was a 500.
func TestStoreRowInAnotherSRIDIsAMisfit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.nosrid (id bigint PRIMARY KEY, geom geometry)`)
	f.exec(t, `INSERT INTO {s}.nosrid VALUES (1, ST_MakePoint(1, 1)), (2, ST_SetSRID(ST_MakePoint(2, 2), 4326))`)
	f.exec(t, `GRANT SELECT ON {s}.nosrid TO geotoll_reader`)
	cat := newCatalog(t, tiles.Layer{Name: "nosrid", Table: f.table("nosrid"), GeometryColumn: "geom", SRID: 4326,
		GeometryKind: tiles.KindPoint, Overviews: tiles.Overviews{Off: true}})
	_, err := tiles.NewStore(testenv.ReadPool(t)).Tile(t.Context(), resolve(t, cat, "nosrid"), maptile.New(0, 0, 0))
	if p := problem.From(err); p.Code != problem.Unavailable || !strings.HasPrefix(p.Detail, `layer "nosrid" does not match the database: ST_Transform: Input geometry has unknown (0) SRID`) {
		t.Errorf("Tile: %v (code %q, detail %q); want %q naming the layer and the SRID", err, p.Code, p.Detail, problem.Unavailable)
	}
}

func TestStoreNoLayers(t *testing.T) {
	t.Parallel()
	_, err := tiles.NewStore(nil).Tile(context.Background(), nil, maptile.New(0, 0, 0))
	wantProblem(t, err, http.StatusBadRequest, "layer")
}

func TestStoreUnreachable(t *testing.T) {
	t.Parallel()
	// A pool on a port nobody listens on: connecting fails at query time.
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := tiles.NewStore(pool)
	_, err = store.Tile(t.Context(), resolve(t, demoCatalog(t), "places"), maptile.New(0, 0, 0))
	p := problem.From(err)
	if p.Code != problem.Unavailable || p.RetryAfter != store.RetryAfter || p.RetryAfter <= 0 {
		t.Fatalf("Tile on an unreachable database: %v (code %q, Retry-After %d), want %q with Retry-After %d",
			err, p.Code, p.RetryAfter, problem.Unavailable, store.RetryAfter)
	}
}

// recordingRenderer passes calls to a Renderer and reports each result.
type recordingRenderer struct {
	tiles.Renderer
	errs chan error
}

func (r recordingRenderer) Tile(ctx context.Context, ls []*tiles.Layer, t maptile.Tile) ([]byte, error) {
	b, err := r.Renderer.Tile(ctx, ls, t)
	r.errs <- err
	return b, err
}

type allowAll struct{}

func (allowAll) AdmitTile(http.ResponseWriter, *http.Request, tiles.Demand) bool { return true }

// TestClientDisconnectCancelsQuery: a client that hangs up mid-tile must
// stop the query in PostgreSQL, not merely abandon it. The slow view would
// run for its full 10 s statement_timeout otherwise.
func TestClientDisconnectCancelsQuery(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// 60 s of sleep, cut at 60 s by the layer: only the cancellation can
	// stop it within the 30 s the test waits (a loaded machine may take
	// seconds to notice the client left and to connect for the cancel
	// request).
	f.slowView(t, 120, 0.5)
	cat := newCatalog(t, tiles.Layer{
		Name: "slow", Table: f.table("slow"), GeometryColumn: "geom", StatementTimeout: time.Minute,
	})
	rec := recordingRenderer{Renderer: tiles.NewStore(testenv.ReadPool(t)), errs: make(chan error, 1)}
	srv := httptest.NewServer(router(&tiles.Handler{Catalog: cat, Store: rec, Gate: allowAll{}, Logger: discardLogger()}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/tiles/slow/0/0/0.mvt", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("got a response: %s", resp.Status)
		}
		done <- err
	}()

	f.waitBackends(t, "the tile query running", func(n int) bool { return n == 1 })
	time.Sleep(200 * time.Millisecond) // well into the query
	cancel()
	if err := testenv.Receive(t, done, "the client to return after cancelling"); !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
	f.waitBackendsFor(t, 30*time.Second, "the query cancelled", func(n int) bool { return n == 0 })

	select {
	case err := <-rec.errs:
		if p := problem.From(err); p.Code != problem.Unavailable {
			t.Errorf("Store.Tile after the client left: %v, want %q", err, problem.Unavailable)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Store.Tile did not return within 30 s of the client leaving (its statement would run 60 s)")
	}
}

// Layers without ids and without order_by order their features by what is
// left (points by their cell, others by their geometry): every path of
// their queries runs, budget levels included, and renders the same bytes
// twice.
func TestStoreTileWithoutIDs(t *testing.T) {
	t.Parallel()
	store := tiles.NewStore(testenv.ReadPool(t))
	points := demoLayers()[0]
	points.Name, points.WithoutID, points.OrderBy = "places_noid", true, nil
	tight := points
	tight.Name, tight.MaxTileBytes = "places_noid_tight", 2048
	polys := demoLayers()[1]
	polys.Name, polys.WithoutID, polys.OrderBy, polys.MaxTileBytes = "districts_noid", true, nil, 1024
	cat := demoCatalog(t, points, tight, polys)
	for _, tc := range []struct {
		list    string
		tile    maptile.Tile
		reduced bool
	}{
		{"places_noid", maptile.At(berlin, 5), false},  // clustered
		{"places_noid", maptile.At(berlin, 14), false}, // as stored
		{"places_noid_tight", maptile.At(berlin, 9), true},
		{"districts_noid", maptile.At(berlin, 10), true},
	} {
		r1, err := store.Render(t.Context(), resolve(t, cat, tc.list), tc.tile)
		if err != nil {
			t.Fatalf("%s %v: %v", tc.list, tc.tile, err)
		}
		r2, err := store.Render(t.Context(), resolve(t, cat, tc.list), tc.tile)
		if err != nil {
			t.Fatal(err)
		}
		if len(r1.MVT) == 0 || !bytes.Equal(r1.MVT, r2.MVT) || (len(r1.Reduced) > 0) != tc.reduced {
			t.Errorf("%s %v: %d and %d bytes, reduced %v", tc.list, tc.tile, len(r1.MVT), len(r2.MVT), r1.Reduced)
		}
		ls, err := mvt.Unmarshal(r1.MVT)
		if err != nil || len(ls) != 1 || len(ls[0].Features) == 0 || ls[0].Features[0].ID != nil {
			t.Errorf("%s %v: %v, want features without ids", tc.list, tc.tile, err)
		}
	}
}
