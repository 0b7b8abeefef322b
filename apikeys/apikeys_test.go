package apikeys_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
)

func TestGenerate(t *testing.T) {
	a, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := apikeys.Generate()
	if a == b || !strings.HasPrefix(a, "gt_") || len(a) != 46 {
		t.Fatalf("keys %q %q", a, b)
	}
	if apikeys.HashOf(a) == apikeys.HashOf(b) {
		t.Fatal("distinct keys share a hash")
	}
}

func TestStoreAndRing(t *testing.T) {
	ctx := context.Background()
	store := apikeys.NewStore(testenv.Pool(t))
	name := strings.ReplaceAll(testenv.Prefix(t), "geotoll-test-", "t")
	t.Cleanup(func() {
		_, _ = testenv.Pool(t).Exec(context.Background(), "DELETE FROM geotoll.api_keys WHERE name LIKE $1", name+"%")
	})

	plain, k, err := store.Create(ctx, name, "pro", false)
	if err != nil {
		t.Fatal(err)
	}
	if k.ID == 0 || k.Tier != "pro" || !strings.HasPrefix(plain, k.Prefix) {
		t.Fatalf("created %+v for %q", k, plain)
	}
	if _, _, err := store.Create(ctx, name, "pro", false); !errors.Is(err, apikeys.ErrNameTaken) {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, _, err := store.Create(ctx, "bad name; drop", "pro", false); !errors.Is(err, apikeys.ErrInvalid) {
		t.Fatalf("invalid name: %v", err)
	}

	// Only the hash is stored.
	var stored int
	if err := testenv.Pool(t).QueryRow(ctx, "SELECT count(*) FROM geotoll.api_keys WHERE key_prefix = $1 AND position($2 in key_hash::text) = 0", k.Prefix, plain).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("stored rows %d, %v", stored, err)
	}

	// The read role can load the ring.
	readStore := apikeys.NewStore(testenv.ReadPool(t))
	const refresh = 200 * time.Millisecond
	ring := apikeys.NewRing(readStore.Active, refresh, nil)
	if _, ok := ring.Lookup(plain); ok {
		t.Fatal("lookup before the first load")
	}
	if err := ring.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok := ring.Lookup(plain)
	if !ok || got.Name != name || got.Tier != "pro" {
		t.Fatalf("lookup: %+v %v", got, ok)
	}
	if _, ok := ring.Lookup(plain + "x"); ok {
		t.Fatal("a wrong key matched")
	}

	// Revocation takes effect within one refresh interval of Run (the test
	// allows 5).
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go ring.Run(runCtx)
	if err := store.Revoke(ctx, name); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now()
	for {
		if _, ok := ring.Lookup(plain); !ok {
			break
		}
		if waited := time.Since(revokedAt); waited > 5*refresh {
			t.Fatalf("revoked key still accepted after %v with a %v refresh", waited, refresh)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := store.Revoke(ctx, "no-such-key-"+name); !errors.Is(err, apikeys.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	// Revoking again finds nothing active, and says so.
	if err := store.Revoke(ctx, name); !errors.Is(err, apikeys.ErrRevoked) {
		t.Fatalf("revoke again: %v, want ErrRevoked", err)
	}
	keys, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range keys {
		if l.Name == name {
			found = l.RevokedAt != nil
		}
	}
	if !found {
		t.Fatal("List does not show the key as revoked")
	}
}

// A failed refresh keeps the keys the ring had.
func TestRingKeepsKeysWhenLoadFails(t *testing.T) {
	calls := 0
	ring := apikeys.NewRing(func(context.Context) (map[apikeys.Hash]apikeys.Key, error) {
		calls++
		if calls > 1 {
			return nil, errors.New("database down")
		}
		return map[apikeys.Hash]apikeys.Key{apikeys.HashOf("k"): {Name: "k", Tier: "free"}}, nil
	}, time.Hour, nil)
	if err := ring.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ring.Refresh(context.Background()); err == nil {
		t.Fatal("failing load reported success")
	}
	if _, ok := ring.Lookup("k"); !ok {
		t.Fatal("keys lost after a failed refresh")
	}
	if ring.Age() < 0 {
		t.Fatal("Age after a load is negative")
	}
}

// A refresh that hangs is bounded: the ring keeps trying. Once the keys are
// older than the ring's bound (six intervals by default), admin keys lose
// their rights — a revoked admin key must not keep working forever — while
// ordinary keys keep working (a database outage must not lock every client
// out).
func TestRingHungRefreshSuspendsAdminRights(t *testing.T) {
	var calls atomic.Int32
	ring := apikeys.NewRing(func(ctx context.Context) (map[apikeys.Hash]apikeys.Key, error) {
		if calls.Add(1) == 1 {
			return map[apikeys.Hash]apikeys.Key{
				apikeys.HashOf("boss"): {ID: 1, Name: "boss", Tier: "free", Admin: true},
				apikeys.HashOf("user"): {ID: 2, Name: "user", Tier: "free"},
			}, nil
		}
		<-ctx.Done() // a database that never answers
		return nil, ctx.Err()
	}, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	if err := ring.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if k, ok := ring.Lookup("boss"); !ok || !k.Admin {
		t.Fatalf("fresh admin key: %+v %v", k, ok)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go ring.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d loads in 10 s with a 20 ms interval: a hung refresh blocks the ring", calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		if k, ok := ring.Lookup("boss"); ok && !k.Admin {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin key still has admin rights with keys %s old", ring.Age())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ring.Age() <= 6*20*time.Millisecond {
		t.Fatalf("admin rights suspended at age %s, before the bound", ring.Age())
	}
	if k, ok := ring.Lookup("user"); !ok || k.Name != "user" {
		t.Fatal("an ordinary key stopped working while the keys are stale")
	}
}

// listeningRing is a ring over the read role that listens for key changes
// on a connection named app, with a periodic reload an hour away: whatever
// it sees within the test came through LISTEN/NOTIFY.
func listeningRing(t *testing.T, app string) *apikeys.Ring {
	t.Helper()
	pool := testenv.ReadPool(t)
	ring := apikeys.NewRing(apikeys.NewStore(pool).Active, time.Hour, slog.New(slog.DiscardHandler))
	ring.Connect = func(ctx context.Context) (*pgx.Conn, error) {
		cfg := pool.Config().ConnConfig.Copy()
		cfg.RuntimeParams["application_name"] = app
		pgcall.CloseOnCancel(cfg) // as Store.Connect does
		return pgx.ConnectConfig(ctx, cfg)
	}
	if err := ring.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ring.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for !ring.Listening() {
		if time.Now().After(deadline) {
			t.Fatal("the ring never listened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ring
}

// eventually waits up to d for ok.
func eventually(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two rings — two replicas — learn of a new key and of its revocation
// within a second, through LISTEN/NOTIFY; a ring whose listening
// connection is cut reconnects and catches up.
func TestRingsFollowKeyChanges(t *testing.T) {
	owner := apikeys.NewStore(testenv.Pool(t))
	name := strings.ReplaceAll(testenv.Prefix(t), "geotoll-test-", "n")
	t.Cleanup(func() {
		_, _ = testenv.Pool(t).Exec(context.Background(), "DELETE FROM geotoll.api_keys WHERE name LIKE $1", name+"%")
	})
	app := "geotoll-test-" + name
	a, b := listeningRing(t, app+"-a"), listeningRing(t, app+"-b")
	both := func(key string, want bool) func() bool {
		return func() bool {
			_, okA := a.Lookup(key)
			_, okB := b.Lookup(key)
			return okA == want && okB == want
		}
	}
	plain, _, err := owner.Create(t.Context(), name, "free", false)
	if err != nil {
		t.Fatal(err)
	}
	// Notified within a second (with the 5× tolerance of TESTING.md): the
	// rings' own reload is an hour away.
	eventually(t, 5*time.Second, "a new key works on both rings", both(plain, true))
	if err := owner.Revoke(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a revoked key is refused on both rings", both(plain, false))

	// Cut ring a's listening connection (the read role may end its own
	// backends): it reconnects, and what changed meanwhile reaches it.
	var cut int
	if err := testenv.ReadPool(t).QueryRow(t.Context(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app+"-a").Scan(&cut); err != nil || cut != 1 {
		t.Fatalf("terminate the listener: %d %v", cut, err)
	}
	again, _, err := owner.Create(t.Context(), name+"-2", "free", false)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a key created while ring a reconnects reaches it", both(again, true))
}

// The keys' age counts from when their load began, not when it ended: a
// load that took its time returns keys as of its start (a revocation made
// meanwhile may be missing), and MaxAge bounds how old they may be.
func TestRingAgeCountsFromTheLoadsStart(t *testing.T) {
	ring := apikeys.NewRing(func(ctx context.Context) (map[apikeys.Hash]apikeys.Key, error) {
		time.Sleep(300 * time.Millisecond) // a slow database
		return map[apikeys.Hash]apikeys.Key{apikeys.HashOf("k"): {Name: "k", Tier: "free"}}, nil
	}, time.Hour, nil)
	if err := ring.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if age := ring.Age(); age < 300*time.Millisecond {
		t.Errorf("Age %s right after a load of 300 ms: want at least its duration", age)
	}
}

// RedactPath hides each path segment that holds a key's mark, and only
// those.
func TestRedactPath(t *testing.T) {
	key := "gt_" + strings.Repeat("x7", 21) + "Q"
	for in, want := range map[string]string{
		"/tiles/places/0/0/0.mvt":                   "/tiles/places/0/0/0.mvt",
		"/tiles/places/0/0/0.mvt&key=" + key:        "/tiles/places/0/0/REDACTED",
		"/" + key + "/tiles/places/0/0/0.mvt":       "/REDACTED/tiles/places/0/0/0.mvt",
		"/maps/tiles/places/0/0/0.mvt?" + key + "/": "/maps/tiles/places/0/0/REDACTED/",
		"": "",
	} {
		if got := apikeys.RedactPath(in); got != want {
			t.Errorf("RedactPath(%q) = %q, want %q", in, got, want)
		}
	}
}
