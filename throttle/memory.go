package throttle

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// defaultMaxKeys is MemoryOptions.MaxKeys when left 0.
const defaultMaxKeys = 1 << 20

// MemoryOptions configures a MemoryStore. The zero value is ready to use.
type MemoryOptions struct {
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
	// MaxKeys bounds the buckets held; 0 means 1<<20. When an admission
	// would exceed it, the bucket that expires soonest is dropped (it would
	// have vanished first anyway). Dropping a bucket refills it, so the
	// bound trades a little leniency for bounded memory.
	MaxKeys int
}

// MemoryStore runs admit.lua's arithmetic (applyBatch) in process, for a
// single instance without Redis or as the local fallback when Redis fails.
// For the same operations at the same times it decides what RedisStore
// decides. It is safe for concurrent use; a finish applies at once.
//
// Like Redis, it forgets a bucket once it is full again and holds nothing
// open: a missing bucket is a full one.
type MemoryStore struct {
	now     func() time.Time
	maxKeys int

	mu    sync.Mutex
	keys  map[string]*memKey
	byExp expiryHeap   // the same keys, soonest expiry first
	held  atomic.Int64 // len(keys), read without mu (forget)
}

var _ Store = (*MemoryStore)(nil)

type memKey struct {
	key   string
	state keyState
	index int // position in MemoryStore.byExp
	// full, when above 0, is the capacity (micro-tokens) a seeded bucket
	// is kept until it would hold (see seed); 0 for any other bucket.
	full float64
	// spent is what the key's admissions and settlements took from it
	// (micro-tokens; refunds count less), since it was made: see settleOwed.
	spent float64
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	s := &MemoryStore{now: opts.Now, maxKeys: opts.MaxKeys, keys: make(map[string]*memKey)}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxKeys <= 0 {
		s.maxKeys = defaultMaxKeys
	}
	return s
}

// clock reads the store's clock as admit.lua reads TIME: whole seconds
// and microseconds.
func (s *MemoryStore) clock() clock { return clockOf(s.now()) }

// clockOf is t as admit.lua reads TIME: whole seconds and microseconds.
func clockOf(t time.Time) clock {
	return clock{sec: t.Unix(), usec: int64(t.Nanosecond() / 1000)}
}

// Admit implements Store.
func (s *MemoryStore) Admit(ctx context.Context, req Request) (Admission, error) {
	if err := req.validate(); err != nil {
		return Admission{}, err
	}
	if err := ctx.Err(); err != nil {
		return Admission{}, err
	}
	sh := shapeOf(req)
	kind := opAdmit
	if req.Shadow {
		kind = opShadow
	}
	o := op{kind: kind, id: newID(), amount: toMicro(req.Cost)}
	r := s.apply(req.Key, req.Aggregate, sh, o)
	a, err := admission(req, sh, o.amount, r)
	if err != nil {
		return Admission{}, err
	}
	if a.Allowed {
		paid := o.amount
		if a.Shadow {
			paid = 0
		}
		a.Ticket = &Ticket{owner: s, key: req.Key, agg: req.Aggregate, limit: req.Limit, debt: req.Debt, id: o.id,
			paid: paid, cost: req.Cost, shadow: a.Shadow, maxOpen: sh.max, ttl: time.Duration(sh.ttlMS) * time.Millisecond}
	}
	return a, nil
}

// finish implements finisher.
func (s *MemoryStore) finish(t *Ticket, delta float64) { s.finishOpen(t, delta) }

// finishOpen finishes t and reports whether its bucket still held it open
// (else nothing was settled: the bucket was dropped, or t expired).
func (s *MemoryStore) finishOpen(t *Ticket, delta float64) bool {
	return s.apply(t.key, t.agg, t.shape(), op{kind: opFinish, id: t.id, amount: delta}).status == stAdmitted
}

// Peek implements Store.
func (s *MemoryStore) Peek(ctx context.Context, b Bucket) (Result, error) {
	return s.PeekFloor(ctx, b, -1, 0)
}

// PeekFloor implements FloorPeeker.
func (s *MemoryStore) PeekFloor(ctx context.Context, b Bucket, debt, _ float64) (Result, error) {
	if err := checkPeek(ctx, b, debt); err != nil {
		return Result{}, err
	}
	sh := peekShape(b, debt)
	r := s.apply(b.Key, nil, sh, op{kind: opPeek})
	return Result{Allowed: true, Remaining: fromMicro(r.tokens), Limit: b.Limit,
		ResetAfter: millis(resetMS(r.tokens, sh.rate, sh.capacity))}, nil
}

// forget drops the buckets of keys: a fallback store's, once the shared
// store has answered for them again, so that the next outage starts each
// from what the shared store last reported, not from what it left here
// the last time.
func (s *MemoryStore) forget(keys ...string) {
	if s.held.Load() == 0 { // the usual case, a fallback store outside an outage: no lock on every admission
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range keys {
		if k := s.keys[key]; k != nil {
			s.drop(k)
		}
	}
}

// settleOwed ends the bucket of key in a fallback store once the shared
// store answers for it again, and returns what it owes the shared one, in
// tokens: what was spent from it beyond what it would have refilled to
// without those spends (at l, the limit of its share) — what the shared
// bucket, which saw none of them, holds too much. A bucket that owes
// nothing is dropped; one that owes is dropped when carry is set (its
// debt goes with the caller's next settlement there), and kept otherwise,
// so that a later answer can carry it.
func (s *MemoryStore) settleOwed(key string, l Limit, carry bool) float64 {
	if s.held.Load() == 0 { // the usual case, a fallback store outside an outage
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil {
		return 0
	}
	capacity := toMicro(l.Capacity)
	b := k.state.b
	elapsed := max(clockOf(s.now()).us()-clock{sec: b.sec, usec: b.usec}.us(), 0)
	level := min(b.tokens+toMicro(l.Rate)*float64(elapsed)/1e6, capacity)
	owed := max(min(k.spent, capacity-level), 0)
	if owed == 0 || carry {
		s.drop(k)
	}
	return fromMicro(owed)
}

// seed sets a missing bucket to tokens as of age ago (what the shared
// store last reported of it, or a replica's share of that), so that a
// fallback bucket does not start full; it refills from then at b's rate,
// up to the capacity of each request that reads it. With full set (a
// replica's share of a bucket of capacity full, whose requests may each be
// given a capacity up to full, or their price when it is more: b's
// capacity may be either), the bucket is kept
// at least until it would hold full, through every later write: a bucket
// the store forgot is then full to every request, as a missing one is.
func (s *MemoryStore) seed(key string, b Bucket, tokens float64, age time.Duration, full float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	c := clockOf(now)
	s.sweep(c.ms())
	if _, ok := s.keys[key]; ok {
		return
	}
	at := clockOf(now.Add(-max(age, 0)))
	rate, capacity := toMicro(b.Limit.Rate), toMicro(b.Limit.Capacity)
	st := keyState{found: true, b: bucketVal{tokens: min(toMicro(tokens), capacity), sec: at.sec, usec: at.usec}}
	need := at.ms() + resetMS(st.b.tokens, rate, capacity)
	full = toMicro(full)
	if full > capacity {
		need = max(need, at.ms()+resetMS(st.b.tokens, rate, full))
	}
	st.b.expiresMS = later(c.ms(), max(need, c.ms()))
	s.put(key, st)
	if k := s.keys[key]; k != nil && full > 0 {
		k.full = full
	}
}

// hold keeps the bucket b of key, when seeded with a full capacity (see
// seed), at least until it would hold that capacity at rate.
func (s *MemoryStore) hold(key string, b *bucketVal, rate float64) {
	if k := s.keys[key]; k != nil && k.full > 0 {
		b.expiresMS = max(b.expiresMS, clock{sec: b.sec, usec: b.usec}.ms()+resetMS(b.tokens, rate, k.full))
	}
}

// apply runs one op on key under the lock, with the key's expiry as Redis
// would keep it.
func (s *MemoryStore) apply(key string, agg *Bucket, sh shape, o op) opResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Read the clock under the lock, like TIME inside the script, so the
	// operations on one bucket see time move forward.
	c := s.clock()
	s.sweep(c.ms())
	st := s.state(key)
	var ast *keyState
	if agg != nil {
		a := s.state(agg.Key)
		ast = &a
	}
	r := applyBatch(&st, ast, sh, c, []op{o})[0]
	if st.found {
		s.hold(key, &st.b, sh.rate)
		s.put(key, st)
		if k := s.keys[key]; k != nil && r.status == stAdmitted {
			k.spent += o.amount // an admission's price, a settlement's delta
		}
	}
	if ast != nil && ast.found {
		s.hold(agg.Key, &ast.b, sh.aggRate)
		s.put(agg.Key, *ast)
	}
	return r
}

func (s *MemoryStore) state(key string) keyState {
	if k := s.keys[key]; k != nil {
		return k.state // its open map is shared: apply puts it back
	}
	return keyState{}
}

// put stores a key's state and its expiry.
func (s *MemoryStore) put(key string, st keyState) {
	if k := s.keys[key]; k != nil {
		k.state = st
		heap.Fix(&s.byExp, k.index)
		return
	}
	k := &memKey{key: key, state: st}
	s.keys[key] = k
	s.held.Store(int64(len(s.keys)))
	heap.Push(&s.byExp, k)
	for len(s.keys) > s.maxKeys {
		s.drop(s.byExp[0])
	}
}

// size reports how many keys the store holds, expired ones included until
// they are swept.
func (s *MemoryStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// sweep drops the keys that have expired by nowMS: whose expiry nowMS is
// past, as Redis expires a key of PEXPIREAT t once its clock is past t.
// Each key is swept at most once, so the cost is amortised over the
// admissions that made them.
func (s *MemoryStore) sweep(nowMS int64) {
	for len(s.byExp) > 0 && s.byExp[0].state.b.expiresMS < nowMS {
		s.drop(s.byExp[0])
	}
}

func (s *MemoryStore) drop(k *memKey) {
	heap.Remove(&s.byExp, k.index)
	delete(s.keys, k.key)
	s.held.Store(int64(len(s.keys)))
}

// expiryHeap is a container/heap of keys ordered by expiry.
type expiryHeap []*memKey

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].state.b.expiresMS < h[j].state.b.expiresMS }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	k := x.(*memKey)
	k.index = len(*h)
	*h = append(*h, k)
}
func (h *expiryHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.index = -1
	return k
}
