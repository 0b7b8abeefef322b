package throttle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// downScripter is a Redis that refuses every call: one that is down.
type downScripter struct {
	redis.Scripter
	calls atomic.Int64
}

func (d *downScripter) fail(ctx context.Context) *redis.Cmd {
	d.calls.Add(1)
	c := redis.NewCmd(ctx)
	c.SetErr(errors.New("connection refused"))
	return c
}

func (d *downScripter) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return d.fail(ctx)
}

func (d *downScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return d.fail(ctx)
}

// TestAdmitOfAnotherShapeIsSentWhileRetriesWait: while Redis is down, the
// void of a failed admit waits in the caller's lane to be sent again. An
// admit of another shape (another in-flight cap, TTL or debt floor) that
// comes meanwhile must still be sent — and fail, so that the fail mode
// decides it — not stay queued behind a void that rides along with every
// batch and ends it before the admit, sending the void again and again.
func TestAdmitOfAnotherShapeIsSentWhileRetriesWait(t *testing.T) {
	t.Parallel()
	down := &downScripter{}
	s := NewRedisStore(down, RedisOptions{Timeout: 100 * time.Millisecond})
	b := Bucket{Key: BucketKey("test", "k", "shape"), Limit: Limit{Rate: 1, Capacity: 100}}
	if _, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 1, MaxInFlight: 4, TTL: time.Second}); err == nil {
		t.Fatal("an admit was answered by a Redis that refuses every call")
	}
	before := down.calls.Load()
	done := make(chan error, 1)
	go func() {
		_, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 1, Debt: 100, MaxInFlight: 8, TTL: 30 * time.Second})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the admit of another shape was answered by a Redis that refuses every call")
		}
		// Its own call, and at most one that carried the void alone.
		if n := down.calls.Load() - before; n > 2 {
			t.Errorf("the admit of another shape took %d calls, want at most 2", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the admit of another shape was never answered: %d calls sent since the first admit failed", down.calls.Load()-before)
	}
}
