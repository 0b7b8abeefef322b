// Package chaos is geotoll's fault-injection suite. Its only code is the
// test TestChaos, which starts its own processes on free loopback ports: one
// throwaway PostgreSQL/PostGIS cluster for the whole suite (initdb,
// migrated, seeded with a small demo data set; the scenarios that stop or
// pause it start it again), and, per scenario, Redis servers, a 3-master
// Redis Cluster or Sentinels, and geotoll processes of one binary (built
// once with go build, or GEOTOLL_CHAOS_BIN, as make chaos builds it). Each
// scenario breaks one of them, and checks
// what callers see: Redis killed, paused (SIGSTOP), script cache flushed,
// out of memory, with each fail_mode (and the local buckets' share of
// 1/replicas); a cancelled request during a Redis
// hang; Redis Cluster; a Redis Sentinel failover; two replicas sharing one
// budget; PostgreSQL stopped,
// paused and its pool exhausted; SIGTERM with requests in flight; slow
// header senders, oversized headers and bodies.
//
// Every scenario that spends tokens compares the bucket in Redis with the
// requests it saw admitted: nothing lost, nothing charged twice.
//
// It never touches the shared development services (PostgreSQL on 55432,
// Redis on 56379): it signals only the processes it started, by pid.
//
//	make chaos                      # the suite, with its table of results
//	go test -run TestChaos -v ./chaos
//
// It runs under go test ./... as well (and so in make test); -short skips
// it, unless GEOTOLL_REQUIRE_SERVICES=1 or CI=true, when it runs anyway.
// Without redis-server, redis-cli or PostgreSQL 15 it skips, unless
// GEOTOLL_REQUIRE_SERVICES=1 or CI=true, when it fails.
package chaos
