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
