package throttle

import (
	"math"
	"testing"
	"time"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name string
		l    Limit
		ok   bool
	}{
		{"ok", Limit{Rate: 20, Capacity: 100}, true},
		{"fractional", Limit{Rate: 0.001, Capacity: 0.5}, true},
		{"zero value", Limit{}, false},
		{"zero rate", Limit{Rate: 0, Capacity: 1}, false},
		{"negative capacity", Limit{Rate: 1, Capacity: -1}, false},
		{"NaN rate", Limit{Rate: math.NaN(), Capacity: 1}, false},
		{"Inf capacity", Limit{Rate: 1, Capacity: math.Inf(1)}, false},
		{"refills too slowly", Limit{Rate: 1e-9, Capacity: 100}, false},
		{"a micro-token per second", Limit{Rate: 1e-6, Capacity: 10}, true},
		{"rate rounds to no micro-token", Limit{Rate: 4e-7, Capacity: 1e-3}, false},
		{"capacity rounds to no micro-token", Limit{Rate: 1, Capacity: 4e-7}, false},
		{"capacity above 9e9", Limit{Rate: 100, Capacity: 1e10}, false},
		{"refills in exactly the most allowed", Limit{Rate: 1, Capacity: maxFillSeconds}, true},
		{"a hair slower", Limit{Rate: 1, Capacity: maxFillSeconds * (1 + 1e-15)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.l.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestResultAfter: a result d later (a refusal the toll's tarpit held)
// describes the bucket as it is then: the waits shorter by d, the tokens
// more by the refill, never more than the capacity.
func TestResultAfter(t *testing.T) {
	t.Parallel()
	limit := Limit{Rate: 20, Capacity: 60}
	for _, tc := range []struct {
		name string
		in   Result
		held time.Duration
		want Result
	}{
		{"no hold", Result{Remaining: 2, RetryAfter: 900 * time.Millisecond, ResetAfter: 2900 * time.Millisecond, Limit: limit}, 0,
			Result{Remaining: 2, RetryAfter: 900 * time.Millisecond, ResetAfter: 2900 * time.Millisecond, Limit: limit}},
		{"part of the wait", Result{Remaining: 2, RetryAfter: 2 * time.Second, ResetAfter: 2900 * time.Millisecond, Limit: limit}, 500 * time.Millisecond,
			Result{Remaining: 12, RetryAfter: 1500 * time.Millisecond, ResetAfter: 2400 * time.Millisecond, Limit: limit}},
		{"past the reset", Result{Remaining: 50, RetryAfter: 100 * time.Millisecond, ResetAfter: 500 * time.Millisecond, Limit: limit}, time.Second,
			Result{Remaining: 60, Limit: limit}},
		{"no limit known", Result{Remaining: 3, RetryAfter: time.Second}, 400 * time.Millisecond,
			Result{Remaining: 3, RetryAfter: 600 * time.Millisecond}},
	} {
		if got := tc.in.After(tc.held); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestRetryAfterOfADeepDebt: a bucket deep in debt at a slow rate may need
// longer to pay than a time.Duration holds (about 292 years): its
// Retry-After and reset saturate at the longest Duration instead of
// wrapping to a negative or short wait, and the headers' seconds follow.
func TestRetryAfterOfADeepDebt(t *testing.T) {
	const longest = time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		name  string
		limit Limit
		debt  float64
		want  time.Duration // Retry-After of a request of the whole capacity, and the reset
	}{
		{"shallow", Limit{Rate: 1, Capacity: 10}, 5, 15 * time.Second},
		{"deep, within a Duration", Limit{Rate: 1e-3, Capacity: 10}, 1e6, 1_000_010_000 * time.Second},
		{"deeper than a Duration", Limit{Rate: 1e-6, Capacity: 10}, 1e4, longest},
		{"the deepest debt at the slowest rate", Limit{Rate: 1e-6, Capacity: 1000}, 9e9, longest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore(MemoryOptions{Now: newFakeClock().Now}) // no refill
			b := Bucket{Key: "deep", Limit: tc.limit}
			mustAdmit(t, s, Request{Bucket: b, Cost: tc.limit.Capacity, Debt: tc.debt}).Ticket.Settle(tc.limit.Capacity + tc.debt + 1)
			a := mustAdmit(t, s, Request{Bucket: b, Cost: tc.limit.Capacity, Debt: tc.debt})
			r := a.Result
			if a.Allowed || r.Remaining != -tc.debt {
				t.Fatalf("a request from a bucket at its floor: allowed=%v, %v tokens; want refused at %v", a.Allowed, r.Remaining, -tc.debt)
			}
			if r.RetryAfter != tc.want || r.ResetAfter != tc.want {
				t.Errorf("retry after %v, reset after %v; want %v", r.RetryAfter, r.ResetAfter, tc.want)
			}
			wantSeconds := int(tc.want / time.Second)
			if tc.want%time.Second != 0 {
				wantSeconds++
			}
			if r.RetryAfterSeconds() != wantSeconds || r.ResetSeconds() != wantSeconds {
				t.Errorf("headers: retry %d s, reset %d s; want %d", r.RetryAfterSeconds(), r.ResetSeconds(), wantSeconds)
			}
		})
	}
}

// FuzzRetryAfter: whatever a valid bucket holds, between its debt floor
// and its capacity, a refusal's waits are never negative, and the headers'
// seconds never below the wait's.
func FuzzRetryAfter(f *testing.F) {
	f.Add(1.0, 10.0, 5.0, -5.0, 10.0)
	f.Add(1e-6, 1000.0, 9e9, -9e9, 1000.0)
	f.Fuzz(func(t *testing.T, rate, capacity, debt, tokens, cost float64) {
		limit := Limit{Rate: rate, Capacity: capacity}
		req := Request{Bucket: Bucket{Key: "k", Limit: limit}, Cost: cost, Debt: debt}
		if req.validate() != nil || !(tokens >= -debt && tokens <= capacity) {
			t.Skip()
		}
		sh := shapeOf(req)
		a, err := admission(req, sh, toMicro(cost), opResult{status: stRefused, tokens: toMicro(tokens)})
		if err != nil {
			t.Fatal(err)
		}
		r := a.Result
		if r.RetryAfter < time.Millisecond || r.ResetAfter < 0 {
			t.Fatalf("%+v holding %v, cost %v: retry %v, reset %v", limit, tokens, cost, r.RetryAfter, r.ResetAfter)
		}
		if s := r.RetryAfterSeconds(); s < 1 || time.Duration(s) < r.RetryAfter/time.Second {
			t.Fatalf("retry %v: Retry-After %d s", r.RetryAfter, s)
		}
		if s := r.ResetSeconds(); s < 0 || time.Duration(s) < r.ResetAfter/time.Second {
			t.Fatalf("reset %v: %d s", r.ResetAfter, s)
		}
	})
}
