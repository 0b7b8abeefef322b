package throttle

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// manualTimers stands in for time.AfterFunc (RedisStore.afterFunc,
// Global.afterFunc): its timers never fire by themselves, and the test
// runs a timer's func when it wants, as that timer would once it fired.
// So a test decides what happens between a timer's firing and its func
// taking the lock.
type manualTimers struct {
	mu   sync.Mutex
	made []manualTimer
}

type manualTimer struct {
	t *time.Timer // never fires; stopped as the code under test stops it
	f func()
}

func (m *manualTimers) afterFunc(_ time.Duration, f func()) *time.Timer {
	t := time.AfterFunc(time.Duration(math.MaxInt64), func() {})
	m.mu.Lock()
	defer m.mu.Unlock()
	m.made = append(m.made, manualTimer{t: t, f: f})
	return t
}

// n is how many timers were made.
func (m *manualTimers) n() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.made)
}

// fire runs the func of the i-th timer made.
func (m *manualTimers) fire(i int) {
	m.mu.Lock()
	f := m.made[i].f
	m.mu.Unlock()
	f()
}

// stopAll stops the timers made and returns those that were still set:
// neither stopped nor fired (a fired one is stopped by the test first).
func (m *manualTimers) stopAll() (set []*time.Timer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mt := range m.made {
		if mt.t.Stop() {
			set = append(set, mt.t)
		}
	}
	return set
}

// TestLaneTimerThatFiredLateLeavesTheNextOne: a lane's timer fires while
// an admit of its caller comes, and the admit's kick gets the lock first:
// it stops the timer (too late: its func is waiting for the lock), sends
// its batch, and the lane, left holding what waits to be sent again,
// sets a new timer. When the old timer's func gets the lock at last, the
// new timer is the lane's; the old one's func must leave it so. Forgetting
// it would leave two timers set for one lane, one of them out of the
// lane's reach — a kick no longer stops it — each waking the lane.
func TestLaneTimerThatFiredLateLeavesTheNextOne(t *testing.T) {
	t.Parallel()
	timers := &manualTimers{}
	s := NewRedisStore(&downScripter{}, RedisOptions{RetryInterval: time.Hour, LeaseRequests: -1})
	s.afterFunc = timers.afterFunc
	req := Request{Bucket: Bucket{Key: BucketKey("test", "k", "late-timer"), Limit: Limit{Rate: 1, Capacity: 10}},
		Cost: 1, TTL: time.Minute}
	// Redis is down: the admit's void waits in the lane, its timer set.
	if _, err := s.Admit(context.Background(), req); err == nil {
		t.Fatal("an admit was answered by a Redis that refuses every call")
	}
	if n := timers.n(); n != 1 {
		t.Fatalf("%d timers made after a failed admit, want 1 (the void's retry)", n)
	}
	// The timer fires; before its func takes the lock, the next admit's
	// kick stops it, sends (the void rides along) and fails, and the lane
	// sets its next timer.
	if _, err := s.Admit(context.Background(), req); err == nil {
		t.Fatal("an admit was answered by a Redis that refuses every call")
	}
	if n := timers.n(); n != 2 {
		t.Fatalf("%d timers made after two failed admits, want 2", n)
	}
	timers.fire(0) // the first timer's func gets the lock at last
	s.mu.Lock()
	var own *time.Timer
	if l := s.lanes[req.Key]; l != nil {
		own = l.timer
	}
	s.mu.Unlock()
	set := timers.stopAll()
	if len(set) != 1 || set[0] != own {
		t.Fatalf("%d timers set for the lane after its late timer ran (the lane's own among them: %v), want 1: the lane's own",
			len(set), own != nil && slices.Contains(set, own))
	}
}
