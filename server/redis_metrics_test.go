package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/geotoll/geotoll/throttle"
)

// Each counter reads its own field of the store's statistics, at scrape
// time.
func TestWatchRedis(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	stats := throttle.RedisStats{Calls: 3, Ops: 7, Admits: 2, Failures: 1, Dropped: 6, Moot: 8, Leases: 4, Local: 5}
	if err := WatchRedis(reg, func() throttle.RedisStats { return stats }); err != nil {
		t.Fatal(err)
	}
	stats.Calls++
	want := `
# HELP geotoll_redis_call_failures_total Budget script calls that failed or were not answered in time.
# TYPE geotoll_redis_call_failures_total counter
geotoll_redis_call_failures_total 1
# HELP geotoll_redis_calls_total Budget script calls sent to Redis.
# TYPE geotoll_redis_calls_total counter
geotoll_redis_calls_total 4
# HELP geotoll_redis_lease_admits_total Requests admitted in process on a lease of their caller's bucket (redis.lease_requests), without a Redis call.
# TYPE geotoll_redis_lease_admits_total counter
geotoll_redis_lease_admits_total 5
# HELP geotoll_redis_operations_dropped_total Settlements and releases dropped unsent: too many waiting for one caller, or the Redis client closed.
# TYPE geotoll_redis_operations_dropped_total counter
geotoll_redis_operations_dropped_total 6
# HELP geotoll_redis_operations_moot_total Settlements, voids and releases dropped after failed calls once they could no longer change their bucket (their request's TTL and the bucket's refill past).
# TYPE geotoll_redis_operations_moot_total counter
geotoll_redis_operations_moot_total 8
# HELP geotoll_redis_operations_total Budget operations those calls carried: a caller's admissions, settlements and releases waiting at once share a call.
# TYPE geotoll_redis_operations_total counter
geotoll_redis_operations_total 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
