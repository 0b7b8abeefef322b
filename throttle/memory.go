package throttle

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// defaultMaxKeys is MemoryOptions.MaxKeys when left 0.
const defaultMaxKeys = 1 << 20

// MemoryOptions configures a MemoryStore. The zero value is ready to use.
type MemoryOptions struct {
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
	// MaxKeys bounds the buckets held; 0 means 1<<20. When a spend would
	// exceed it, the oldest bucket is dropped: the one that expires soonest,
	// i.e. that would have vanished first anyway (with one Limit for all
	// keys, simply the least recently charged). Dropping a bucket refills it,
	// so the bound trades a little leniency for bounded memory.
	MaxKeys int
}

// MemoryStore runs the bucket algorithm of bucket.lua in process, for a
// single instance without Redis or as the local fallback when Redis fails.
// For the same sequence of calls at the same times it returns what
// RedisStore returns. It is safe for concurrent use.
//
// Like Redis, it forgets a bucket once it could have refilled from empty
// (Limit.FillTime after its last spend): a missing bucket is a full one.
type MemoryStore struct {
	now     func() time.Time
	maxKeys int

	mu      sync.Mutex
	buckets map[string]*memBucket
	byExp   expiryHeap                  // the same buckets, soonest expiry first
	slots   map[string]map[string]int64 // in-flight ids → expiry (Unix µs), by slot key
}

var _ Store = (*MemoryStore)(nil)

type memBucket struct {
	key     string
	state   bucketState
	expires int64 // Unix microseconds
	index   int   // position in MemoryStore.byExp
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	s := &MemoryStore{
		now:     opts.Now,
		maxKeys: opts.MaxKeys,
		buckets: make(map[string]*memBucket),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxKeys <= 0 {
		s.maxKeys = defaultMaxKeys
	}
	return s
}

// Spend implements Store.
func (s *MemoryStore) Spend(ctx context.Context, key string, limit Limit, cost float64) (Result, error) {
	if err := checkSpend(limit, cost); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return s.apply(key, limit, cost), nil
}

// Peek implements Store.
func (s *MemoryStore) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	if err := limit.Validate(); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return s.apply(key, limit, 0), nil
}

// size reports how many buckets the store holds, expired ones included until
// they are swept.
func (s *MemoryStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buckets)
}

func (s *MemoryStore) apply(key string, limit Limit, cost float64) Result {
	s.mu.Lock()
	defer s.mu.Unlock()

	// Read the clock under the lock, like TIME inside the script, so that
	// the operations on one bucket see time move forward.
	t := s.now()
	nowUS := t.UnixMicro()
	s.sweep(nowUS)

	b := s.buckets[key]
	var prev bucketState
	if b != nil {
		prev = b.state
	}
	o := step(prev, b != nil, timeSeconds(t), limit.Rate, limit.Capacity, cost)
	if o.Write {
		s.writeLocked(key, o, nowUS)
	}
	return o.result(limit, cost)
}

// writeLocked stores an outcome's next state with its TTL.
func (s *MemoryStore) writeLocked(key string, o outcome, nowUS int64) {
	expires := nowUS + o.TTLMS*1000
	b := s.buckets[key]
	if b == nil {
		b = &memBucket{key: key, state: o.Next, expires: expires}
		s.buckets[key] = b
		heap.Push(&s.byExp, b)
		for len(s.buckets) > s.maxKeys {
			s.drop(s.byExp[0])
		}
		return
	}
	b.state, b.expires = o.Next, expires
	heap.Fix(&s.byExp, b.index)
}

// sweep drops the buckets that have expired by nowUS. Each bucket is swept at
// most once, so the cost is amortised over the spends that created them.
func (s *MemoryStore) sweep(nowUS int64) {
	for len(s.byExp) > 0 && s.byExp[0].expires <= nowUS {
		s.drop(s.byExp[0])
	}
}

func (s *MemoryStore) drop(b *memBucket) {
	heap.Remove(&s.byExp, b.index)
	delete(s.buckets, b.key)
}

// expiryHeap is a container/heap of buckets ordered by expiry.
type expiryHeap []*memBucket

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	b := x.(*memBucket)
	b.index = len(*h)
	*h = append(*h, b)
}
func (h *expiryHeap) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	b.index = -1
	return b
}
