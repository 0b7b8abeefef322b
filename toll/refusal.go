package toll

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
)

// refused answers a request its own bucket, its IPv6 network's bucket or
// its in-flight cap refused: 429, with the budget headers. key is the
// bucket that refused it, whose refusals queue in the tarpit.
func (t *Toll) refused(w http.ResponseWriter, r *http.Request, tier Tier, pol string, key string, p Price, a throttle.Admission) {
	t.observe(tier.Name, p, Refused)
	if t.Tarpit != nil && a.Refusal != throttle.RefusedInFlight {
		refusedAt := time.Now()
		held := t.Tarpit.hold(r.Context(), key, a.Result.RetryAfter)
		// Every budget header describes the bucket when the answer leaves —
		// but no later than when it could pay this request: held longer,
		// behind the bucket's other refusals, those come first.
		a.Result = a.Result.After(min(held, a.Result.RetryAfter))
		// The caller's other requests admitted or settled while it was
		// held spent from the bucket: what the store learnt of it since,
		// refilled to now, when it holds less, is the bucket as the answer
		// leaves, and its wait the one this request has left. Never more:
		// what a replica learns may lack what it spent in its own buckets
		// while Redis was out, and a refusal queued behind others shows
		// the bucket no later than when it could pay (above).
		if k, ok := t.Store.(knower); ok && held > 0 {
			if res, ok := k.KnownSince(throttle.Bucket{Key: key, Limit: a.Result.Limit}, refusedAt, a.Result.Cost); ok &&
				res.Remaining < a.Result.Remaining {
				a.Result = res
			}
		}
	}
	switch a.Refusal {
	case throttle.RefusedAggregate:
		// The budget shown is the one that refused: the network's.
		network := Tier{Name: t.IPv6Aggregate.policy(tier.Name), Limit: t.IPv6Aggregate.Limit}
		setBudgetHeaders(w.Header(), pol, network, a.Result)
		problem.Write(w, r, exhausted(network.Name, a.Result))
	case throttle.RefusedInFlight:
		setBudgetHeaders(w.Header(), pol, tier, a.Result)
		setConcurrencyHeaders(w.Header(), tier)
		problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 1,
			Detail: fmt.Sprintf("%d requests of yours are already in flight, the most tier %q allows; retry when one finishes", maxInFlight(tier), tier.Name),
			Extra:  map[string]any{"in_flight": maxInFlight(tier), "max_in_flight": maxInFlight(tier), "violated-policies": []string{tier.Name + "-concurrency"}}})
	default:
		setBudgetHeaders(w.Header(), pol, tier, a.Result)
		problem.Write(w, r, exhausted(tier.Name, a.Result))
	}
}

// knower is a store that knows, without asking, what its caller's
// requests taught it of a bucket since a moment (throttle.Failover).
type knower interface {
	KnownSince(b throttle.Bucket, since time.Time, cost float64) (throttle.Result, bool)
}

// refusing is the key of the bucket that refused a: the caller's own, or
// its IPv6 network's (agg).
func refusing(a throttle.Admission, own throttle.Bucket, agg *throttle.Bucket) string {
	if a.Refusal == throttle.RefusedAggregate && agg != nil {
		return agg.Key
	}
	return own.Key
}

func maxInFlight(tier Tier) int {
	if tier.MaxInFlight > 0 {
		return tier.MaxInFlight
	}
	return throttle.DefaultMaxInFlight
}

// globalRefused answers a request the global database budget refused:
// 503, the caller's own budget untouched.
func (t *Toll) globalRefused(w http.ResponseWriter, r *http.Request, tier Tier, pol string, own throttle.Bucket, p Price, g throttle.Result) {
	t.observe(tier.Name, p, GlobalRefused)
	if res, err := t.read(r.Context(), tier, own, 0); err == nil {
		res.Cost = p.Cost
		setBudgetHeaders(w.Header(), pol, tier, res)
	}
	problem.Write(w, r, &problem.Error{Code: problem.ReducedCapacity, RetryAfter: g.RetryAfterSeconds(),
		Detail: "the database is at its budget for everyone; your own budget was not charged",
		Extra:  map[string]any{"cost": micro(p.Cost), "retry_after": g.RetryAfterSeconds(), "violated-policies": []string{"global"}}})
}

// tooExpensive answers a price no bucket of the tier could ever pay (a
// composite of many layers, or above the tier's max_cost): 422, nothing
// spent, with the budget headers. Its max_request_cost is most, the most
// one request of the tier may cost (Toll.mostPerRequest), as /budget
// reports it — not /budget's max_cost, the most one layer's price is.
func (t *Toll) tooExpensive(w http.ResponseWriter, r *http.Request, tier Tier, pol string, own throttle.Bucket, p Price, most float64) {
	t.observe(tier.Name, p, TooExpensive)
	if res, err := t.read(r.Context(), tier, own, 0); err == nil {
		res.Cost = p.Cost
		setBudgetHeaders(w.Header(), pol, tier, res)
	}
	problem.Write(w, r, &problem.Error{Code: problem.OutOfRange,
		Detail: fmt.Sprintf("this request costs %s tokens; tier %q allows at most %s per request: zoom in, narrow it or ask for fewer layers",
			fmtTokens(p.Cost), tier.Name, fmtTokens(most)),
		Extra: map[string]any{"cost": micro(p.Cost), "max_request_cost": micro(most)}})
}

// limiterFailed answers a request whose budget could not be decided: 503.
// A failing store is logged once, when it starts failing (by the
// Failover); a client that hung up is routine.
func (t *Toll) limiterFailed(w http.ResponseWriter, r *http.Request, tier Tier, p Price, err error) {
	t.observe(tier.Name, p, LimiterFailure)
	if level := slog.LevelWarn; !errors.Is(err, throttle.ErrStoreDown) {
		if r.Context().Err() != nil {
			level = slog.LevelDebug
		}
		t.logger().LogAttrs(r.Context(), level, "budget unavailable",
			slog.String("tier", tier.Name), slog.Any("err", err))
	}
	detail := "the rate limiter is unavailable"
	if errors.Is(err, throttle.ErrBusy) {
		detail = "too many of your requests are waiting for the rate limiter"
	}
	problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: detail, RetryAfter: 1, Err: err})
}

// unknownKey is the detail of the 401 of an unknown or revoked key.
const unknownKey = "unknown or revoked API key"

// keysUnreadDetail is the detail of the 503 of a key presented before
// the API keys were ever read.
const keysUnreadDetail = "the API keys have not been read yet (the database has not answered since this server started): try again"

// keysRead is a KeyLookup that says when it last read its keys
// (apikeys.Ring): a negative age, never.
type keysRead interface{ Age() time.Duration }

// keysUnread reports whether r presents what may be a valid key (one of
// the keys' shape) to a server that has never read its keys, which can
// then tell neither way: a 503 to try again, not a 401 telling a client
// with a valid key that it is wrong.
func (t *Toll) keysUnread(r *http.Request) bool {
	k, ok := t.Keys.(keysRead)
	if !ok || k.Age() >= 0 {
		return false
	}
	key, _ := APIKey(r)
	return apikeys.Generated(key)
}

// refuseKey answers an unknown or revoked key (or, on a fence admin route,
// a request without a key): 401 with detail, charged 1 token to the caller
// address's failed-auth bucket; 429 once that bucket is dry. That charge
// follows the fail mode as every budget does (the store's Failover): when
// it fails all the same (fail_mode closed, or a flood the limiter cannot
// queue) the answer is the 503 a valid key gets then, never an uncharged
// 401 — which would let guesses go unlimited and tell them from a valid key.
func (t *Toll) refuseKey(w http.ResponseWriter, r *http.Request, caller Caller, p Price, detail string) {
	note(r.Context(), caller)
	tier := Tier{Name: FailedAuthTier, Limit: t.FailedAuth}
	res, err := throttle.Charge(r.Context(), t.Store, throttle.Bucket{Key: caller.bucketKey(t.Prefix), Limit: tier.Limit}, 1)
	if err != nil {
		t.limiterFailed(w, r, tier, p, err)
		return
	}
	unread := detail == unknownKey && t.keysUnread(r)
	outcome := Unauthorized
	switch {
	case !res.Allowed:
		outcome = Refused // a 429, counted with the others (geotoll_throttled_total)
	case unread:
		outcome = KeysUnread
	}
	t.observe(FailedAuthTier, p, outcome)
	setBudgetHeaders(w.Header(), tokenPolicy(tier.Name, tier.Limit), tier, res)
	if !res.Allowed {
		problem.Write(w, r, exhausted(tier.Name, res))
		return
	}
	if unread {
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: keysUnreadDetail, RetryAfter: 1})
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="geotoll"`)
	problem.Write(w, r, &problem.Error{Code: problem.Unauthorized, Detail: detail})
}

// keyRepeated answers 400, charging nothing, a request that gives its key
// more than once (apikeys.Repeated; query: ?key= counts), and reports
// whether it did.
func keyRepeated(w http.ResponseWriter, r *http.Request, query bool) bool {
	name := apikeys.Repeated(r, query)
	if name == "" {
		return false
	}
	// param names the query parameter or the header at fault, as the
	// other header problems do (If-Match, Content-Type).
	problem.Write(w, r, problem.Malformed(name, "%s is given more than once: send one key", name))
	return true
}

// exhausted is the 429 of a bucket that could not pay res.Cost. A refusal
// a tarpit held may leave when the bucket has refilled to the price: its
// detail then says that the bucket held less when it was refused, not
// that it holds less now.
func exhausted(policy string, res throttle.Result) *problem.Error {
	format := "this request costs %s tokens; %s remain. Retry in %d s."
	if micro(res.Remaining) >= micro(res.Cost) {
		format = "this request costs %s tokens, more than the bucket held when it was refused; %s remain now. Retry in %d s."
	}
	return &problem.Error{
		Code:       problem.Exhausted,
		Detail:     fmt.Sprintf(format, fmtFloat(micro(res.Cost)), fmtFloat(micro(res.Remaining)), res.RetryAfterSeconds()),
		RetryAfter: res.RetryAfterSeconds(),
		Extra: map[string]any{
			"cost":              micro(res.Cost),
			"remaining":         micro(res.Remaining),
			"retry_after":       res.RetryAfterSeconds(),
			"violated-policies": []string{policy},
		},
	}
}

// policies is the RateLimit-Policy of a caller in tier: every policy that
// can refuse its requests — its bucket (in tokens), its in-flight cap
// "<tier>-concurrency" (in concurrent requests), for an anonymous IPv6
// caller its network's bucket "<tier>-ipv6-/48", and the database's
// shared budget "global".
func (t *Toll) policies(tier Tier, ipv6 bool) string {
	pol := tokenPolicy(tier.Name, tier.Limit) +
		`, "` + tier.Name + `-concurrency";q=` + strconv.Itoa(maxInFlight(tier)) + `;qu="concurrent-requests"`
	if ipv6 {
		pol += ", " + tokenPolicy(t.IPv6Aggregate.policy(tier.Name), t.IPv6Aggregate.Limit)
	}
	if t.Global != nil {
		pol += ", " + tokenPolicy("global", t.Global.Bucket.Limit)
	}
	return pol
}

// tokenPolicy is a bucket's quota policy: q tokens ("qu"), refilled from
// empty in w seconds.
func tokenPolicy(name string, l throttle.Limit) string {
	return strconv.Quote(name) + ";q=" + strconv.Itoa(int(math.Floor(l.Capacity))) + `;qu="tokens";w=` +
		strconv.Itoa(int(math.Ceil(l.FillTime().Seconds())))
}

// setBudgetHeaders writes the budget of one priced response:
// draft-ietf-httpapi-ratelimit-headers (RateLimit-Policy pol, and
// RateLimit for tier's bucket), the older X-RateLimit-* trio, and
// X-Request-Cost. A bucket in debt (after a settlement) shows 0 remaining.
func setBudgetHeaders(h http.Header, pol string, tier Tier, res throttle.Result) {
	capacity := int(math.Floor(tier.Limit.Capacity))
	// Whole tokens the bucket holds, never one it lacks (a request of r
	// tokens is admitted): rounded to the store's micro-token first, so
	// that float arithmetic's 41.99999999 is 42, then down — 42.99996 is
	// 42, not 43.
	remaining := max(0, int(math.Floor(micro(res.Remaining))))
	h.Set("RateLimit-Policy", pol)
	h.Set("RateLimit", strconv.Quote(tier.Name)+";r="+strconv.Itoa(remaining)+";t="+strconv.Itoa(res.ResetSeconds()))
	h.Set("X-RateLimit-Limit", strconv.Itoa(capacity))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.Itoa(res.ResetSeconds()))
	h.Set("X-Request-Cost", fmtTokens(res.Cost))
}

// setConcurrencyHeaders makes RateLimit and the X-RateLimit-* trio of a
// refusal by the in-flight cap describe that policy, "<tier>-concurrency"
// of RateLimit-Policy, rather than the caller's bucket, which did not
// refuse: no request left (r=0) of max_in_flight, for a second (a slot
// frees when one of the caller's requests ends; Retry-After says 1).
func setConcurrencyHeaders(h http.Header, tier Tier) {
	h.Set("RateLimit", strconv.Quote(tier.Name+"-concurrency")+";r=0;t=1")
	h.Set("X-RateLimit-Limit", strconv.Itoa(maxInFlight(tier)))
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", "1")
}

// fmtTokens writes tokens as the bucket is charged them, to the
// micro-token (X-Request-Cost, X-Request-Cost-Estimate, a detail's
// price): rounded to a thousandth, a header summed over a caller's
// requests fell short of what the bucket lost (a base of 0.0104 read
// 0.01, 4 % less).
func fmtTokens(v float64) string { return fmtFloat(micro(v)) }

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// micro writes tokens to the micro-token, the store's unit: a body's cost
// and remaining tokens as the bucket holds them, so that a remainder is
// never shown paying a cost it cannot (42.99996 left, 43 to pay), nor
// below a cost it pays.
func micro(v float64) float64 { return math.Round(v*1e6) / 1e6 }
