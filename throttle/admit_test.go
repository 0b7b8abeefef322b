package throttle

import (
	"context"
	"sync"
	"testing"
	"time"
)

// admitters runs a test against the in-process store, the real Redis and
// the real Redis Cluster.
func admitters(t *testing.T, run func(t *testing.T, a Store, key func(string) string)) {
	t.Run("memory", func(t *testing.T) {
		s := NewMemoryStore(MemoryOptions{})
		run(t, s, func(id string) string { return BucketKey("mem", "test", id) })
	})
	t.Run("redis", func(t *testing.T) {
		forEachRedis(t, func(t *testing.T, f *redisFixture) {
			run(t, f.store, func(id string) string {
				k := f.key(id)
				f.t.Cleanup(func() { f.rdb.Del(context.Background(), SlotKey(k)) })
				return k
			})
		})
	})
}

// slow is a limit that barely refills during a test, so token counts are exact.
var slow = Limit{Rate: 0.001, Capacity: 100}

func approxEq(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }

func TestAdmitGlobalRefusalRefundsClient(t *testing.T) {
	admitters(t, func(t *testing.T, s Store, key func(string) string) {
		ctx := context.Background()
		client, global := key("client"), key("global")
		glimit := Limit{Rate: 0.001, Capacity: 50}
		ask := Ask{Spends: []Spend{{client, slow, 30}, {global, glimit, 30}}}
		a, err := s.Admit(ctx, ask)
		if err != nil || !a.Admitted {
			t.Fatalf("first: %+v %v", a, err)
		}
		// The global bucket (20 left) refuses the second: the client is refunded.
		a, err = s.Admit(ctx, ask)
		if err != nil {
			t.Fatal(err)
		}
		if a.Admitted || a.Refused() != 1 || !a.Results[0].Allowed || a.Results[1].Allowed {
			t.Fatalf("second: %+v", a)
		}
		if r, _ := s.Peek(ctx, client, slow); !approxEq(r.Remaining, 70) {
			t.Fatalf("client holds %v after a global refusal, want 70 (refunded)", r.Remaining)
		}
		if r, _ := s.Peek(ctx, global, glimit); !approxEq(r.Remaining, 20) {
			t.Fatalf("global holds %v, want 20", r.Remaining)
		}
	})
}

func TestAdmitClientRefusalRefundsGlobal(t *testing.T) {
	admitters(t, func(t *testing.T, s Store, key func(string) string) {
		ctx := context.Background()
		client, global := key("client"), key("global")
		small := Limit{Rate: 0.001, Capacity: 40}
		ask := Ask{Spends: []Spend{{client, small, 30}, {global, slow, 30}}}
		if a, err := s.Admit(ctx, ask); err != nil || !a.Admitted {
			t.Fatalf("first: %+v %v", a, err)
		}
		a, err := s.Admit(ctx, ask)
		if err != nil || a.Admitted || a.Refused() != 0 {
			t.Fatalf("second: %+v %v", a, err)
		}
		if r, _ := s.Peek(ctx, global, slow); !approxEq(r.Remaining, 70) {
			t.Fatalf("global holds %v after a client refusal, want 70 (refunded)", r.Remaining)
		}
	})
}

func TestAdmitConcurrencyCap(t *testing.T) {
	admitters(t, func(t *testing.T, s Store, key func(string) string) {
		ctx := context.Background()
		bucket := key("client")
		slot := func(id string) *Slot {
			return &Slot{Key: SlotKey(bucket), ID: id, Max: 2, TTL: time.Minute}
		}
		ask := func(id string) Ask { return Ask{Spends: []Spend{{bucket, slow, 1}}, Slot: slot(id)} }
		for _, id := range []string{"r1", "r2"} {
			if a, err := s.Admit(ctx, ask(id)); err != nil || !a.Admitted {
				t.Fatalf("%s: %+v %v", id, a, err)
			}
		}
		a, err := s.Admit(ctx, ask("r3"))
		if err != nil || a.Admitted || !a.SlotRefused || a.InFlight != 2 {
			t.Fatalf("third in flight: %+v %v", a, err)
		}
		if r, _ := s.Peek(ctx, bucket, slow); !approxEq(r.Remaining, 98) {
			t.Fatalf("bucket holds %v, want 98: the refused request must not be charged", r.Remaining)
		}
		if err := s.Release(ctx, *slot("r1")); err != nil {
			t.Fatal(err)
		}
		if a, err := s.Admit(ctx, ask("r3")); err != nil || !a.Admitted {
			t.Fatalf("after release: %+v %v", a, err)
		}
	})
}

func TestAdmitDeadSlotsExpire(t *testing.T) {
	admitters(t, func(t *testing.T, s Store, key func(string) string) {
		ctx := context.Background()
		bucket := key("client")
		sl := Slot{Key: SlotKey(bucket), ID: "crashed", Max: 1, TTL: 30 * time.Millisecond}
		if a, _ := s.Admit(ctx, Ask{Spends: []Spend{{bucket, slow, 1}}, Slot: &sl}); !a.Admitted {
			t.Fatal("first refused")
		}
		// Never released (the holder "crashed"): after its TTL the cap frees.
		if _, isMem := s.(*MemoryStore); isMem {
			time.Sleep(40 * time.Millisecond) // MemoryStore here runs on the real clock
		} else {
			time.Sleep(40 * time.Millisecond)
		}
		sl.ID = "next"
		if a, err := s.Admit(ctx, Ask{Spends: []Spend{{bucket, slow, 1}}, Slot: &sl}); err != nil || !a.Admitted {
			t.Fatalf("slot of a dead request never freed: %+v %v", a, err)
		}
	})
}

// Many concurrent admits with a cap never hold more than Max at once, and
// every admitted request is charged exactly once.
func TestAdmitConcurrentCapAndAccounting(t *testing.T) {
	admitters(t, func(t *testing.T, s Store, key func(string) string) {
		ctx := context.Background()
		bucket, global := key("client"), key("global")
		var (
			mu       sync.Mutex
			held     int
			maxHeld  int
			admitted int
			wg       sync.WaitGroup
		)
		for i := 0; i < 100; i++ {
			wg.Go(func() {
				sl := Slot{Key: SlotKey(bucket), ID: "req-" + time.Now().String() + string(rune('a'+i%26)) + string(rune('a'+i/26)), Max: 3, TTL: time.Minute}
				a, err := s.Admit(ctx, Ask{Spends: []Spend{{bucket, slow, 1}, {global, slow, 0.5}}, Slot: &sl})
				if err != nil {
					t.Error(err)
					return
				}
				if !a.Admitted {
					return
				}
				mu.Lock()
				held++
				admitted++
				maxHeld = max(maxHeld, held)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				held--
				mu.Unlock()
				if err := s.Release(ctx, sl); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if maxHeld > 3 || admitted == 0 {
			t.Fatalf("held at most %d (cap 3), admitted %d", maxHeld, admitted)
		}
		c, _ := s.Peek(ctx, bucket, slow)
		g, _ := s.Peek(ctx, global, slow)
		if !approxEq(100-c.Remaining, float64(admitted)) || !approxEq(100-g.Remaining, 0.5*float64(admitted)) {
			t.Fatalf("admitted %d but client spent %v and global %v", admitted, 100-c.Remaining, 100-g.Remaining)
		}
	})
}

func TestRefundToMissingBucketCreatesNothing(t *testing.T) {
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		k := f.key("never-spent")
		if _, err := f.store.Refund(context.Background(), k, slow, 5); err != nil {
			t.Fatal(err)
		}
		if f.exists(k) {
			t.Fatal("a refund created a bucket")
		}
		m := NewMemoryStore(MemoryOptions{})
		if _, err := m.Refund(context.Background(), "k", slow, 5); err != nil || m.size() != 0 {
			t.Fatalf("memory refund created a bucket: %v %d", err, m.size())
		}
	})
}

func TestAdmitNoScriptRecovery(t *testing.T) {
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		ctx := context.Background()
		if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		k, g := f.key("a"), f.key("g")
		f.t.Cleanup(func() { f.rdb.Del(ctx, SlotKey(k)) })
		a, err := f.store.Admit(ctx, Ask{Spends: []Spend{{k, slow, 1}, {g, slow, 1}}, Slot: &Slot{Key: SlotKey(k), ID: "x", Max: 1, TTL: time.Second}})
		if err != nil || !a.Admitted {
			t.Fatalf("admit after SCRIPT FLUSH: %+v %v", a, err)
		}
		// Only one of the two scripts missing: the part that ran is not run again.
		if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := f.store.script.Load(ctx, f.rdb).Err(); err != nil {
			t.Fatal(err)
		}
		if err := f.store.Release(ctx, Slot{Key: SlotKey(k), ID: "x"}); err != nil {
			t.Fatal(err)
		}
		f.rdb.ScriptFlush(ctx)
		f.store.script.Load(ctx, f.rdb)
		a, err = f.store.Admit(ctx, Ask{Spends: []Spend{{k, slow, 1}, {g, slow, 1}}, Slot: &Slot{Key: SlotKey(k), ID: "y", Max: 1, TTL: time.Second}})
		if err != nil || !a.Admitted {
			t.Fatalf("admit with inflight.lua missing: %+v %v", a, err)
		}
		if r, _ := f.store.Peek(ctx, k, slow); !approxEq(r.Remaining, 98) {
			t.Fatalf("bucket holds %v after two admits, want 98 (no double charge)", r.Remaining)
		}
	})
}

// An ask of a slot alone (no spend) holds and releases a slot like any
// other ask, and is refused at the cap.
func TestAdmitSlotOnly(t *testing.T) {
	admitters(t, func(t *testing.T, s Store, key func(string) string) {
		ctx := context.Background()
		slot := func(id string) *Slot { return &Slot{Key: SlotKey(key("slot-only")), ID: id, Max: 1, TTL: time.Minute} }
		a, err := s.Admit(ctx, Ask{Slot: slot("a")})
		if err != nil || !a.Admitted || a.InFlight != 1 || len(a.Results) != 0 {
			t.Fatalf("first: %+v %v", a, err)
		}
		if b, err := s.Admit(ctx, Ask{Slot: slot("b")}); err != nil || b.Admitted || !b.SlotRefused {
			t.Fatalf("second at the cap: %+v %v", b, err)
		}
		if err := s.Release(ctx, *slot("a")); err != nil {
			t.Fatal(err)
		}
		if b, err := s.Admit(ctx, Ask{Slot: slot("b")}); err != nil || !b.Admitted {
			t.Fatalf("after the release: %+v %v", b, err)
		}
		if _, err := s.Admit(ctx, Ask{}); err == nil {
			t.Fatal("an empty ask was accepted")
		}
	})
}
