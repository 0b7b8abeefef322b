package throttle

import (
	"log/slog"
	"math"
	"testing"
	"time"
)

// PeekFloor reads a caller's bucket as its next admission loads it: lifted
// to the request's debt floor (not to a deeper one it was run to: a
// tier's max_cost lowered since) and, while a lease counts, to that floor
// less what is leased — the depth the admission finds, not the floor
// alone. Peek reads it as stored.
func TestPeekFloorReadsAsTheAdmissionLoads(t *testing.T) {
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("peekfloor"), Limit: Limit{Rate: 0.001, Capacity: 100}}
		deep := shapeOf(Request{Bucket: b, Debt: 100})
		admit := func(sh shape, id string, cost float64) opResult {
			t.Helper()
			return f.run(b.Key, sh, []op{{kind: opAdmit, id: id, amount: cost * micro}})[0]
		}
		near := func(what string, got Result, want float64) {
			t.Helper()
			if math.Abs(got.Remaining-want) > 0.01 { // the refill of a few seconds at 0.001/s
				t.Errorf("%s: %v, want %v", what, got.Remaining, want)
			}
		}
		// A lease of 12 out, a request of 88 that cost 288: the bucket is
		// at -112, the floor less what is leased.
		lease := f.run(b.Key, deep, []op{{kind: opLease, id: "L", amount: 12 * micro}})[0]
		if r := admit(deep, "r1", 88); r.status != stAdmitted || lease.status != stAdmitted {
			t.Fatalf("lease %+v, admit %+v", lease, r)
		}
		f.run(b.Key, deep, []op{{kind: opFinish, id: "r1", amount: 200 * micro}})
		got, err := f.store.PeekFloor(t.Context(), b, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		near("PeekFloor with a lease out", got, -112)
		if r := admit(deep, "r2", 1); r.status != stRefused || math.Abs(fromMicro(r.tokens)-got.Remaining) > 0.01 {
			t.Errorf("the admission found %v (status %d), PeekFloor read %v", fromMicro(r.tokens), r.status, got.Remaining)
		}
		// The lease given back (nothing spent on it): -100. The tier's
		// floor lowered to 1: its admissions find -1, Peek still -100.
		f.run(b.Key, deep, []op{{kind: opFinish, id: "L", amount: -12 * micro}})
		got, err = f.store.PeekFloor(t.Context(), b, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		near("PeekFloor under a floor lowered to 1", got, -1)
		stored, err := f.store.Peek(t.Context(), b)
		if err != nil {
			t.Fatal(err)
		}
		near("Peek", stored, -100)
		if r := admit(shapeOf(Request{Bucket: b, Debt: 1}), "r3", 1); r.status != stRefused || math.Abs(fromMicro(r.tokens)-got.Remaining) > 0.01 {
			t.Errorf("the admission under the floor of 1 found %v (status %d), PeekFloor read %v", fromMicro(r.tokens), r.status, got.Remaining)
		}
		if _, err := f.store.PeekFloor(t.Context(), b, math.NaN(), 0); err == nil {
			t.Error("PeekFloor took a NaN debt")
		}
		// Through a Failover (as serve reads budgets), whose reads within
		// PeekReuse share one call: a read under another floor is its own.
		fo := &Failover{Primary: f.store, Mode: FailClosed, Timeout: 10 * time.Second, ProbeInterval: time.Hour,
			PeekReuse: time.Second, Logger: slog.New(slog.DiscardHandler)}
		for _, debt := range []float64{1, 100} {
			got, err := fo.PeekFloor(t.Context(), b, debt, 0)
			if err != nil {
				t.Fatal(err)
			}
			near("the Failover's PeekFloor", got, math.Max(-debt, -100))
		}
	})
}
