package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/geotoll/geotoll/throttle"
)

// WatchRedis exports what the budget store sent to Redis, read at scrape
// time from stats (usually (*throttle.RedisStore).Stats):
// geotoll_redis_calls_total (script calls), geotoll_redis_operations_total
// (the operations they carried: a caller's admissions, settlements and
// releases share a call), geotoll_redis_call_failures_total and
// geotoll_redis_lease_admits_total (requests admitted on a lease, without
// a call), geotoll_redis_operations_dropped_total and
// geotoll_redis_operations_moot_total (settlements, voids and releases
// dropped unsent). None has a label.
func WatchRedis(reg prometheus.Registerer, stats func() throttle.RedisStats) error {
	for _, c := range []struct {
		name, help string
		value      func(throttle.RedisStats) uint64
	}{
		{"geotoll_redis_calls_total", "Budget script calls sent to Redis.",
			func(s throttle.RedisStats) uint64 { return s.Calls }},
		{"geotoll_redis_operations_total", "Budget operations those calls carried: a caller's admissions, settlements and releases waiting at once share a call.",
			func(s throttle.RedisStats) uint64 { return s.Ops }},
		{"geotoll_redis_call_failures_total", "Budget script calls that failed or were not answered in time.",
			func(s throttle.RedisStats) uint64 { return s.Failures }},
		{"geotoll_redis_lease_admits_total", "Requests admitted in process on a lease of their caller's bucket (redis.lease_requests), without a Redis call.",
			func(s throttle.RedisStats) uint64 { return s.Local }},
		{"geotoll_redis_operations_dropped_total", "Settlements and releases dropped unsent: too many waiting for one caller, or the Redis client closed.",
			func(s throttle.RedisStats) uint64 { return s.Dropped }},
		{"geotoll_redis_operations_moot_total", "Settlements, voids and releases dropped after failed calls once they could no longer change their bucket (their request's TTL and the bucket's refill past).",
			func(s throttle.RedisStats) uint64 { return s.Moot }},
	} {
		value := c.value
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(value(stats())) })); err != nil {
			return err
		}
	}
	return nil
}
