package throttle

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Spend is one withdrawal of an Ask.
type Spend struct {
	Key   string
	Limit Limit
	Cost  float64
}

// Slot is one in-flight request held against a client's concurrency cap.
type Slot struct {
	Key string        // use SlotKey: it shares the client bucket's hash slot
	ID  string        // unique per request
	Max int           // most requests in flight
	TTL time.Duration // an unreleased slot is presumed dead after this
}

// Ask is everything one request needs before it may run: each Spend, all
// or nothing (the client's bucket and the global database budget), and
// optionally an in-flight slot. Spends may be empty when there is a slot
// (a request that pays nothing but still counts against its cap).
type Ask struct {
	Spends []Spend
	Slot   *Slot
}

// Answer is the outcome of an Ask.
type Answer struct {
	// Admitted is true iff every spend was allowed and the slot acquired.
	// When false, nothing stays deducted and no slot stays held.
	Admitted bool
	// Results, one per Spend, as each bucket answered (a spend that was
	// allowed and then refunded because another part refused shows the
	// refund's remaining tokens).
	Results []Result
	// SlotRefused reports that the concurrency cap refused; InFlight is the
	// client's requests in flight as the store saw them.
	SlotRefused bool
	InFlight    int
	// RefundErr, on a refusal, reports that undoing its granted parts
	// failed: some bucket stays charged for a request that did not run.
	RefundErr error
}

// Refused returns the index of the first refused spend, or -1.
func (a Answer) Refused() int {
	for i, r := range a.Results {
		if !r.Allowed {
			return i
		}
	}
	return -1
}

// SlotKey is the in-flight set of the client whose bucket key is bucketKey;
// it carries the same hash tag, so Redis Cluster keeps both in one slot.
func SlotKey(bucketKey string) string { return bucketKey + ":inflight" }

func (a Ask) validate() error {
	if len(a.Spends) == 0 && a.Slot == nil {
		return errors.New("throttle: an ask needs a spend or a slot")
	}
	for _, s := range a.Spends {
		if err := checkSpend(s.Limit, s.Cost); err != nil {
			return err
		}
	}
	if a.Slot != nil && (a.Slot.Max < 1 || a.Slot.TTL < time.Millisecond || a.Slot.ID == "") {
		return fmt.Errorf("throttle: slot needs Max >= 1, TTL >= 1ms and an ID, got %+v", *a.Slot)
	}
	return nil
}

//go:embed inflight.lua
var inflightLua string

var inflightScript = redis.NewScript(inflightLua)

// pipeliner is what Admit needs beyond redis.Scripter to send a whole Ask in
// one round trip; *redis.Client, *redis.ClusterClient and *redis.Ring have it.
type pipeliner interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// Admit sends every part of ask in ONE round trip (a pipeline of EVALSHAs;
// Redis Cluster splits it per node, in parallel). If any part refuses, a
// second round trip refunds the spends that were allowed and releases the
// slot — so a refused request leaves every bucket as it was, give or take
// the cap at capacity. An Ask of a single spend is a plain Spend.
func (s *RedisStore) Admit(ctx context.Context, ask Ask) (Answer, error) {
	if err := ask.validate(); err != nil {
		return Answer{}, err
	}
	if len(ask.Spends) == 1 && ask.Slot == nil {
		sp := ask.Spends[0]
		r, err := s.run(ctx, sp.Key, sp.Limit, sp.Cost, "spend")
		return Answer{Admitted: r.Allowed, Results: []Result{r}}, err
	}
	p, ok := s.rdb.(pipeliner)
	if !ok {
		return Answer{}, errors.New("throttle: Admit of several parts needs a client that can pipeline")
	}
	cmds, err := s.pipeline(ctx, p, ask)
	if err != nil {
		return Answer{}, err
	}
	ans := Answer{Admitted: true, Results: make([]Result, len(ask.Spends))}
	for i, sp := range ask.Spends {
		o, err := parseReply(cmds[i].Val(), sp.Limit.Capacity)
		if err != nil {
			return Answer{}, fmt.Errorf("throttle: spend %q: %w", sp.Key, err)
		}
		ans.Results[i] = o.result(sp.Limit, sp.Cost)
		ans.Admitted = ans.Admitted && o.Allowed
	}
	acquired := false
	if ask.Slot != nil {
		got, n, err := parseSlotReply(cmds[len(ask.Spends)].Val())
		if err != nil {
			return Answer{}, fmt.Errorf("throttle: slot %q: %w", ask.Slot.Key, err)
		}
		acquired, ans.InFlight = got, n
		ans.SlotRefused = !got
		ans.Admitted = ans.Admitted && got
	}
	if ans.Admitted {
		return ans, nil
	}
	// Undo what was granted, in one more round trip. It runs on a context of
	// its own: a refund lost because the request's short budget ran out
	// would charge a refused request.
	ctx, cancel := undoContext(ctx)
	defer cancel()
	undo := p.Pipeline()
	var refunds []int
	for i, sp := range ask.Spends {
		if ans.Results[i].Allowed {
			// The scripts ran a moment ago in this same round of calls, so
			// EVALSHA finds them.
			s.script.EvalSha(ctx, undo, []string{sp.Key}, formatFloat(sp.Limit.Rate), formatFloat(sp.Limit.Capacity), formatFloat(sp.Cost), "refund")
			refunds = append(refunds, i)
		}
	}
	if acquired {
		inflightScript.EvalSha(ctx, undo, []string{ask.Slot.Key}, "release", ask.Slot.ID)
	}
	if len(refunds) > 0 || acquired {
		res, err := undo.Exec(ctx)
		if err != nil {
			// The refusal stands either way; an error here would send the
			// caller down the fail_mode path and admit (and charge) a
			// request that was refused. Report the lost refund instead.
			ans.RefundErr = fmt.Errorf("throttle: refund after refusal: %w", err)
			return ans, nil
		}
		for j, i := range refunds {
			sp := ask.Spends[i]
			if o, err := parseReply(res[j].(*redis.Cmd).Val(), sp.Limit.Capacity); err == nil {
				ans.Results[i].Remaining, ans.Results[i].ResetAfter = o.Tokens, time.Duration(o.ResetMS)*time.Millisecond
			}
		}
	}
	return ans, nil
}

// pipeline sends the ask's EVALSHAs in one round trip. A part that finds
// its script missing (NOSCRIPT, after a Redis restart or SCRIPT FLUSH) ran
// nothing, so only that part is sent again, through EVAL; the parts that ran
// are never run twice.
func (s *RedisStore) pipeline(ctx context.Context, p pipeliner, ask Ask) ([]*redis.Cmd, error) {
	type part struct {
		script *redis.Script
		key    string
		args   []any
	}
	parts := make([]part, 0, len(ask.Spends)+1)
	for _, sp := range ask.Spends {
		parts = append(parts, part{s.script, sp.Key, s.spendArgs(ctx, sp.Limit, sp.Cost, "spend")})
	}
	if sl := ask.Slot; sl != nil {
		args := []any{"acquire", sl.ID, strconv.Itoa(sl.Max), strconv.FormatInt(max(1, sl.TTL.Milliseconds()), 10)}
		if d, ok := ctx.Deadline(); ok { // the same late guard as the spends
			args = append(args, strconv.FormatInt(d.Add(s.clockSkew()).UnixMilli(), 10))
		}
		parts = append(parts, part{inflightScript, sl.Key, args})
	}
	pipe := p.Pipeline()
	cmds := make([]*redis.Cmd, len(parts))
	for i, pt := range parts {
		cmds[i] = pt.script.EvalSha(ctx, pipe, []string{pt.key}, pt.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command, below
	// Parts whose script was missing ran nothing: send all of them again,
	// with the script text (EVAL, which also caches it), in one more round
	// trip — not one per part, which a 50 ms budget could not afford.
	var missing []int
	for i := range parts {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		again := p.Pipeline()
		for _, i := range missing {
			cmds[i] = parts[i].script.Eval(ctx, again, []string{parts[i].key}, parts[i].args...)
		}
		_, _ = again.Exec(ctx)
	}
	var failed error
	for i := range parts {
		if err := cmds[i].Err(); err != nil && failed == nil {
			failed = err
		}
	}
	if failed == nil {
		return cmds, nil
	}
	// Some part failed (Redis down, OOM…): undo the parts that went through,
	// as far as Redis lets us, and report the failure.
	uctx, cancel := undoContext(ctx)
	defer cancel()
	undo := p.Pipeline()
	for i, sp := range ask.Spends {
		if o, err := parseReply(cmds[i].Val(), sp.Limit.Capacity); cmds[i].Err() == nil && err == nil && o.Allowed {
			s.script.EvalSha(ctx, undo, []string{sp.Key}, formatFloat(sp.Limit.Rate), formatFloat(sp.Limit.Capacity), formatFloat(sp.Cost), "refund")
		}
	}
	if sl := ask.Slot; sl != nil && cmds[len(cmds)-1].Err() == nil {
		inflightScript.EvalSha(ctx, undo, []string{sl.Key}, "release", sl.ID)
	}
	_, _ = undo.Exec(uctx)
	return nil, fmt.Errorf("throttle: admit: %w", failed)
}

// undoTimeout bounds the round trip that refunds the granted parts of a
// refused or failed Ask.
const undoTimeout = time.Second

// undoContext is the context of a refund: not cancelled with the request
// (whose short budget may be spent), bounded by undoTimeout.
func undoContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
}

func parseSlotReply(v any) (bool, int, error) {
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return false, 0, fmt.Errorf("inflight reply is %T %v, want a 2-element array", v, v)
	}
	got, ok1 := r[0].(int64)
	n, ok2 := r[1].(int64)
	if !ok1 || !ok2 || (got != 0 && got != 1) || n < 0 {
		return false, 0, fmt.Errorf("inflight reply %v is malformed", r)
	}
	return got == 1, int(n), nil
}

// Release frees a slot acquired by Admit.
func (s *RedisStore) Release(ctx context.Context, slot Slot) error {
	return inflightScript.Run(ctx, s.rdb, []string{slot.Key}, "release", slot.ID).Err()
}

// Refund gives cost back to the bucket at key (capped at capacity).
func (s *RedisStore) Refund(ctx context.Context, key string, limit Limit, cost float64) (Result, error) {
	if err := checkSpend(limit, cost); err != nil {
		return Result{}, err
	}
	return s.run(ctx, key, limit, cost, "refund")
}

// Admit grants ask atomically: under one lock, every spend is evaluated and
// the slot checked, and only if all pass is anything written.
func (s *MemoryStore) Admit(ctx context.Context, ask Ask) (Answer, error) {
	if err := ask.validate(); err != nil {
		return Answer{}, err
	}
	if err := ctx.Err(); err != nil {
		return Answer{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.now()
	nowUS := t.UnixMicro()
	s.sweep(nowUS)
	ans := Answer{Admitted: true, Results: make([]Result, len(ask.Spends))}
	outs := make([]outcome, len(ask.Spends))
	for i, sp := range ask.Spends {
		b := s.buckets[sp.Key]
		var prev bucketState
		if b != nil {
			prev = b.state
		}
		outs[i] = step(prev, b != nil, timeSeconds(t), sp.Limit.Rate, sp.Limit.Capacity, sp.Cost)
		ans.Admitted = ans.Admitted && outs[i].Allowed
	}
	if sl := ask.Slot; sl != nil {
		held := s.slotsLocked(sl.Key, nowUS)
		ans.InFlight = len(held)
		if len(held) >= sl.Max {
			ans.SlotRefused, ans.Admitted = true, false
		} else if ans.Admitted {
			held[sl.ID] = nowUS + sl.TTL.Microseconds()
			ans.InFlight++
		}
		if len(held) == 0 { // a refused ask leaves no empty set behind
			delete(s.slots, sl.Key)
		}
	}
	for i, sp := range ask.Spends {
		o := outs[i]
		if !ans.Admitted && o.Allowed {
			// Nothing is written: report the bucket as it stays.
			o = step(s.stateOf(sp.Key), s.buckets[sp.Key] != nil, timeSeconds(t), sp.Limit.Rate, sp.Limit.Capacity, 0)
			o.Allowed = true
		} else if ans.Admitted {
			s.writeLocked(sp.Key, o, nowUS)
		}
		ans.Results[i] = o.result(sp.Limit, sp.Cost)
	}
	return ans, nil
}

func (s *MemoryStore) stateOf(key string) bucketState {
	if b := s.buckets[key]; b != nil {
		return b.state
	}
	return bucketState{}
}

// slotsLocked returns the live in-flight ids of key, dropping dead ones.
func (s *MemoryStore) slotsLocked(key string, nowUS int64) map[string]int64 {
	if s.slots == nil {
		s.slots = make(map[string]map[string]int64)
	}
	held := s.slots[key]
	if held == nil {
		held = make(map[string]int64)
		s.slots[key] = held
	}
	for id, exp := range held {
		if exp <= nowUS {
			delete(held, id)
		}
	}
	return held
}

// Release frees a slot acquired by Admit.
func (s *MemoryStore) Release(_ context.Context, slot Slot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.slots[slot.Key]; held != nil {
		delete(held, slot.ID)
		if len(held) == 0 {
			delete(s.slots, slot.Key)
		}
	}
	return nil
}

// Refund gives cost back to the bucket at key (capped at capacity).
func (s *MemoryStore) Refund(ctx context.Context, key string, limit Limit, cost float64) (Result, error) {
	if err := checkSpend(limit, cost); err != nil {
		return Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.now()
	b := s.buckets[key]
	o := refundStep(s.stateOf(key), b != nil, timeSeconds(t), limit.Rate, limit.Capacity, cost)
	if o.Write {
		s.writeLocked(key, o, t.UnixMicro())
	}
	return o.result(limit, cost), nil
}
