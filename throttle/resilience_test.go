package throttle

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/testenv"
)

// A spend that reaches Redis after its not_after (its caller gave up and
// may have charged a fallback instead) charges nothing; one in time does.
func TestRedisLateSpendChargesNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		ctx := context.Background()
		key := f.key("late")
		lim := Limit{Rate: 1e-6, Capacity: 10}
		mustSpend(t, f.store, key, lim, 1)
		_, before, _ := f.state(key)

		past := formatFloat(float64(f.redisNow().Add(-time.Second).UnixMicro()) / 1e6)
		err := f.store.script.Run(ctx, f.rdb, []string{key}, "1e-6", "10", "1", "spend", past).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "GEOTOLL_LATE") {
			t.Fatalf("late spend: %v, want a GEOTOLL_LATE error", err)
		}
		if _, after, _ := f.state(key); after != before {
			t.Fatalf("a late spend changed the bucket: %q -> %q", before, after)
		}
		if err := f.store.script.Run(ctx, f.rdb, []string{key}, "1e-6", "10", "1", "spend", "garbage").Err(); err == nil {
			t.Fatal("a malformed not_after was accepted")
		}

		// Under a deadline, RedisStore sends not_after itself: in time, the
		// spend is charged as usual, by Spend and by Admit.
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if r, err := f.store.Spend(dctx, key, lim, 1); err != nil || !r.Allowed || !approxEq(r.Remaining, 8) {
			t.Fatalf("spend under a deadline: %+v %v", r, err)
		}
		g := f.key("late-global")
		a, err := f.store.Admit(dctx, Ask{Spends: []Spend{{key, lim, 1}, {g, lim, 1}}})
		if err != nil || !a.Admitted || !approxEq(a.Results[0].Remaining, 7) {
			t.Fatalf("admit under a deadline: %+v %v", a, err)
		}
	})
}

// On Redis Cluster, an Ask whose client bucket and global bucket live on
// different masters is one pipeline split per node: it is charged exactly,
// refunded exactly when either part refuses, and never hits CROSSSLOT.
func TestAdmitAcrossClusterMasters(t *testing.T) {
	t.Parallel()
	f := newRedisFixture(t, testenv.RedisCluster(t))
	ctx := context.Background()
	rdb := f.rdb.(*redis.ClusterClient)
	master := func(key string) string {
		c, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("master for %s: %v", key, err)
		}
		return c.Options().Addr
	}
	client := f.key("client")
	var global string
	for i := 0; i < 200 && global == ""; i++ {
		if g := f.key("global-" + strconv.Itoa(i)); master(g) != master(client) {
			global = g
		}
	}
	if global == "" {
		t.Fatal("no key found on another master: is the cluster one node?")
	}
	slot := &Slot{Key: SlotKey(client), ID: "r1", Max: 4, TTL: time.Minute}
	t.Cleanup(func() { rdb.Del(context.Background(), SlotKey(client)) })

	small := Limit{Rate: 1e-6, Capacity: 5}
	admitted := 0
	for i := 0; i < 8; i++ {
		slot.ID = "r" + strconv.Itoa(i)
		a, err := f.store.Admit(ctx, Ask{Spends: []Spend{{client, slow, 2}, {global, small, 2}}, Slot: slot})
		if err != nil {
			t.Fatalf("admit %d: %v", i, err)
		}
		if a.Admitted {
			admitted++
			if err := f.store.Release(ctx, *slot); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The global bucket (5) pays for two spends of 2; each refusal refunds
	// the client's bucket on the other master.
	if admitted != 2 {
		t.Fatalf("admitted %d, want 2", admitted)
	}
	if st, _, _ := f.state(client); !approxEq(st.Tokens, 100-2*2) {
		t.Fatalf("client bucket holds %v, want 96: refusals on another master were not refunded", st.Tokens)
	}
	if st, _, _ := f.state(global); !approxEq(st.Tokens, 1) {
		t.Fatalf("global bucket holds %v, want 1", st.Tokens)
	}
}

// An in-flight acquire that reaches Redis after its not_after takes no slot,
// like a late spend: no slot lingers for a request that never ran.
func TestLateAcquireTakesNoSlot(t *testing.T) {
	forEachRedis(t, testLateAcquire)
}

func testLateAcquire(t *testing.T, f *redisFixture) {
	ctx := context.Background()
	key := SlotKey(f.key("late-slot"))
	f.t.Cleanup(func() { f.rdb.Del(context.Background(), key) })
	past := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	err := inflightScript.Run(ctx, f.rdb, []string{key}, "acquire", "r1", "2", "60000", past).Err()
	if err == nil || !strings.Contains(err.Error(), "GEOTOLL_LATE") {
		t.Fatalf("late acquire: %v, want GEOTOLL_LATE", err)
	}
	if n := f.rdb.ZCard(ctx, key).Val(); n != 0 {
		t.Fatalf("a late acquire left %d slots", n)
	}
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	if err := inflightScript.Run(ctx, f.rdb, []string{key}, "acquire", "r2", "2", "60000", future).Err(); err != nil {
		t.Fatalf("acquire in time: %v", err)
	}
	if n := f.rdb.ZCard(ctx, key).Val(); n != 1 {
		t.Fatalf("in-time acquire holds %d slots, want 1", n)
	}
}
