package throttle

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	const now = 1_700_000_000.5
	lim := Limit{Rate: 2, Capacity: 10}
	tests := []struct {
		name  string
		prev  bucketState
		found bool
		now   float64
		cost  float64
		want  outcome
	}{
		{
			name: "missing bucket is full", now: now, cost: 4,
			want: outcome{Allowed: true, Tokens: 6, ResetMS: 2000, Write: true, Next: bucketState{6, now}, TTLMS: 5000},
		},
		{
			name: "refills with elapsed time", prev: bucketState{1, now - 1.5}, found: true, now: now, cost: 4,
			want: outcome{Allowed: true, Tokens: 0, ResetMS: 5000, Write: true, Next: bucketState{0, now}, TTLMS: 5000},
		},
		{
			name: "refill stops at capacity", prev: bucketState{9, now - 100}, found: true, now: now, cost: 10,
			want: outcome{Allowed: true, Tokens: 0, ResetMS: 5000, Write: true, Next: bucketState{0, now}, TTLMS: 5000},
		},
		{
			name: "rejection deducts nothing and writes nothing", prev: bucketState{1, now}, found: true, now: now, cost: 4,
			want: outcome{Allowed: false, Tokens: 1, RetryMS: 1500, ResetMS: 4500},
		},
		{
			name: "rejection after partial refill", prev: bucketState{0, now - 0.25}, found: true, now: now, cost: 3.5,
			want: outcome{Allowed: false, Tokens: 0.5, RetryMS: 1500, ResetMS: 4750},
		},
		{
			name: "exactly enough is admitted", prev: bucketState{4, now}, found: true, now: now, cost: 4,
			want: outcome{Allowed: true, Tokens: 0, ResetMS: 5000, Write: true, Next: bucketState{0, now}, TTLMS: 5000},
		},
		{
			name: "clock stepped back refills nothing", prev: bucketState{1, now + 60}, found: true, now: now, cost: 2,
			want: outcome{Allowed: false, Tokens: 1, RetryMS: 500, ResetMS: 4500},
		},
		{
			name: "peek of a missing bucket", now: now, cost: 0,
			want: outcome{Allowed: true, Tokens: 10},
		},
		{
			name: "peek refills but writes nothing", prev: bucketState{1, now - 1}, found: true, now: now, cost: 0,
			want: outcome{Allowed: true, Tokens: 3, ResetMS: 3500},
		},
		{
			name: "negative tokens are clamped to zero", prev: bucketState{-5, now}, found: true, now: now, cost: 1,
			want: outcome{Allowed: false, Tokens: 0, RetryMS: 500, ResetMS: 5000},
		},
		{
			name: "tokens above capacity are clamped", prev: bucketState{1e9, now}, found: true, now: now, cost: 1,
			want: outcome{Allowed: true, Tokens: 9, ResetMS: 500, Write: true, Next: bucketState{9, now}, TTLMS: 5000},
		},
		{
			name: "corrupt state is a full bucket", prev: bucketState{math.NaN(), now}, found: true, now: now, cost: 1,
			want: outcome{Allowed: true, Tokens: 9, ResetMS: 500, Write: true, Next: bucketState{9, now}, TTLMS: 5000},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := step(tt.prev, tt.found, tt.now, lim.Rate, lim.Capacity, tt.cost)
			if got != tt.want {
				t.Errorf("step() =\n %+v, want\n %+v", got, tt.want)
			}
		})
	}
}

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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.l.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestLimitFillTime(t *testing.T) {
	if got := (Limit{Rate: 20, Capacity: 100}).FillTime(); got != 5*time.Second {
		t.Errorf("FillTime = %v, want 5s", got)
	}
	if got := (Limit{Rate: 3, Capacity: 1}).FillTime(); got != 333333333*time.Nanosecond {
		t.Errorf("FillTime = %v, want 333.333333ms", got)
	}
}

func TestResultSeconds(t *testing.T) {
	tests := []struct {
		name      string
		r         Result
		retry     int
		resetSecs int
	}{
		{"allowed", Result{Allowed: true, ResetAfter: 1500 * time.Millisecond}, 0, 2},
		{"allowed full", Result{Allowed: true}, 0, 0},
		{"rejected 1.5 s", Result{RetryAfter: 1500 * time.Millisecond, ResetAfter: 4 * time.Second}, 2, 4},
		{"rejected 1 ms", Result{RetryAfter: time.Millisecond, ResetAfter: time.Millisecond}, 1, 1},
		{"rejected 0 is still 1", Result{}, 1, 0},
		{"rejected whole seconds", Result{RetryAfter: 3 * time.Second, ResetAfter: 3*time.Second + 1}, 3, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.RetryAfterSeconds(); got != tt.retry {
				t.Errorf("RetryAfterSeconds() = %d, want %d", got, tt.retry)
			}
			if got := tt.r.ResetSeconds(); got != tt.resetSecs {
				t.Errorf("ResetSeconds() = %d, want %d", got, tt.resetSecs)
			}
		})
	}
}

func TestBucketKey(t *testing.T) {
	if got, want := BucketKey("geotoll", "free", "203.0.113.7"), "geotoll:{free:203.0.113.7}"; got != want {
		t.Errorf("BucketKey = %q, want %q", got, want)
	}
	if got, want := BucketKey("geotoll", "anon", "2001:db8:1:2::/64"), "geotoll:{anon:2001:db8:1:2::/64}"; got != want {
		t.Errorf("BucketKey = %q, want %q", got, want)
	}
}

func TestCheckSpend(t *testing.T) {
	lim := Limit{Rate: 1, Capacity: 10}
	tests := []struct {
		name string
		lim  Limit
		cost float64
		want error
	}{
		{"ok", lim, 10, nil},
		{"zero", lim, 0, ErrInvalidCost},
		{"negative", lim, -1, ErrInvalidCost},
		{"NaN", lim, math.NaN(), ErrInvalidCost},
		{"Inf", lim, math.Inf(1), ErrInvalidCost},
		{"above capacity", lim, 10.5, ErrCostExceedsCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSpend(tt.lim, tt.cost)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("checkSpend(%v) = %v, want %v", tt.cost, err, tt.want)
			}
		})
	}
	if err := checkSpend(Limit{}, 1); err == nil {
		t.Error("checkSpend accepted an invalid limit")
	}
}

func TestParseReply(t *testing.T) {
	tests := []struct {
		name  string
		reply any
		want  outcome
		ok    bool
	}{
		{"allowed", []any{int64(1), "9.75", int64(0), int64(125)}, outcome{Allowed: true, Tokens: 9.75, ResetMS: 125}, true},
		{"rejected", []any{int64(0), "0.5", int64(1500), int64(4750)}, outcome{Tokens: 0.5, RetryMS: 1500, ResetMS: 4750}, true},
		{"full precision", []any{int64(1), "0.30000000000000004", int64(0), int64(1)}, outcome{Allowed: true, Tokens: 0.30000000000000004, ResetMS: 1}, true},
		{"nil", nil, outcome{}, false},
		{"string", "OK", outcome{}, false},
		{"short", []any{int64(1), "1", int64(0)}, outcome{}, false},
		{"long", []any{int64(1), "1", int64(0), int64(0), int64(0)}, outcome{}, false},
		{"allowed not int", []any{"1", "1", int64(0), int64(0)}, outcome{}, false},
		{"allowed 2", []any{int64(2), "1", int64(0), int64(0)}, outcome{}, false},
		{"remaining as integer", []any{int64(1), int64(9), int64(0), int64(0)}, outcome{}, false},
		{"remaining garbage", []any{int64(1), "x", int64(0), int64(0)}, outcome{}, false},
		{"remaining NaN", []any{int64(1), "nan", int64(0), int64(0)}, outcome{}, false},
		{"remaining negative", []any{int64(1), "-1", int64(0), int64(0)}, outcome{}, false},
		{"remaining above capacity", []any{int64(1), "10.5", int64(0), int64(0)}, outcome{}, false},
		{"retry not int", []any{int64(0), "1", "5", int64(0)}, outcome{}, false},
		{"rejected without retry", []any{int64(0), "1", int64(0), int64(0)}, outcome{}, false},
		{"allowed with retry", []any{int64(1), "1", int64(7), int64(0)}, outcome{}, false},
		{"reset negative", []any{int64(1), "1", int64(0), int64(-1)}, outcome{}, false},
		{"reset nil", []any{int64(1), "1", int64(0), nil}, outcome{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseReply(tt.reply, 10)
			if (err == nil) != tt.ok {
				t.Fatalf("parseReply() error = %v, want ok=%v", err, tt.ok)
			}
			if got != tt.want {
				t.Errorf("parseReply() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzBucketArithmetic checks the invariants of step, the arithmetic shared
// by MemoryStore and bucket.lua, over arbitrary stored state, clocks, limits
// and costs (cost 0 is a peek).
func FuzzBucketArithmetic(f *testing.F) {
	const now = 1_700_000_000.123456
	f.Add(10.0, now-1, true, now, 2.0, 10.0, 3.0)
	f.Add(0.0, now, true, now, 2.0, 10.0, 3.0)
	f.Add(0.0, now, false, now, 1.0, 1.0, 1.0)
	f.Add(5.0, now, true, now, 0.1, 100.0, 0.0)
	f.Add(0.7, now-0.000001, true, now, 1e6, 1.0, 1.0)
	f.Add(math.NaN(), math.Inf(-1), true, math.Inf(1), 1e-3, 1e6, 1e6)
	f.Add(-1.0, now+3600, true, now, 20.0, 100.0, 60.0)
	f.Add(1e300, -1e300, true, 0.0, 1e300, 1e300, 1e-300)
	f.Add(0.1+0.2, now-0.3, true, now, 3.0, 7.0, 1.0)
	f.Fuzz(func(t *testing.T, tokens, ts float64, found bool, now, rate, capacity, cost float64) {
		lim := Limit{Rate: rate, Capacity: capacity}
		if lim.Validate() != nil {
			t.Skip()
		}
		if cost != 0 && checkSpend(lim, cost) != nil {
			t.Skip()
		}
		prev := bucketState{Tokens: tokens, TS: ts}
		o := step(prev, found, now, rate, capacity, cost)
		// What the bucket holds now, before any spend: a peek.
		held := step(prev, found, now, rate, capacity, 0)

		if !(o.Tokens >= 0 && o.Tokens <= capacity) {
			t.Fatalf("tokens %v outside [0, %v]", o.Tokens, capacity)
		}
		if !held.Allowed || held.Write || held.RetryMS != 0 {
			t.Fatalf("peek %+v: must be allowed, write nothing, retry 0", held)
		}
		if o.Allowed != (held.Tokens >= cost) {
			t.Fatalf("allowed=%v with %v tokens for cost %v", o.Allowed, held.Tokens, cost)
		}
		if (o.RetryMS > 0) == o.Allowed {
			t.Fatalf("allowed=%v but retry %d ms", o.Allowed, o.RetryMS)
		}
		maxMS := int64(math.Ceil(capacity / rate * 1000))
		if o.ResetMS < 0 || o.ResetMS > maxMS || o.RetryMS > maxMS {
			t.Fatalf("reset %d / retry %d ms outside [0, %d]", o.ResetMS, o.RetryMS, maxMS)
		}
		switch {
		case !o.Allowed:
			if o.Tokens != held.Tokens || o.Write {
				t.Fatalf("rejection changed the bucket: %v -> %v, write=%v", held.Tokens, o.Tokens, o.Write)
			}
		case cost == 0:
			if o.Write || o.Tokens != held.Tokens {
				t.Fatalf("peek changed the bucket: %+v", o)
			}
		default:
			if !o.Write || o.Tokens != held.Tokens-cost || o.Next != (bucketState{o.Tokens, now}) || o.TTLMS != maxMS {
				t.Fatalf("admitted spend of %v from %v: %+v", cost, held.Tokens, o)
			}
		}

		// The retry is exact: waiting RetryAfter is enough, a millisecond
		// less is not (up to the float resolution of the clock itself).
		if o.Allowed || !(now >= 0 && now <= 1e10) {
			return
		}
		// The rejection wrote nothing; restate the bucket as it is now.
		base := bucketState{Tokens: held.Tokens, TS: now}
		slack := 4 * rate * ulp(now+float64(o.RetryMS)/1000)
		if later := step(base, true, now+float64(o.RetryMS)/1000, rate, capacity, cost); !later.Allowed && cost-later.Tokens > slack {
			t.Fatalf("still rejected %d ms later: %v tokens for cost %v (rate %v)", o.RetryMS, later.Tokens, cost, rate)
		}
		if o.RetryMS > 1 {
			if earlier := step(base, true, now+float64(o.RetryMS-1)/1000, rate, capacity, cost); earlier.Allowed && earlier.Tokens > slack {
				t.Fatalf("already admitted %d ms later, retry %d ms is too long", o.RetryMS-1, o.RetryMS)
			}
		}
	})
}

func ulp(x float64) float64 {
	x = math.Abs(x)
	return math.Nextafter(x, math.Inf(1)) - x
}
