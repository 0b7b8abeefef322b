// Package throttle protects the database by charging every request what it
// costs, from a per-client token bucket.
//
// A flat requests-per-second limit assumes every request costs the same;
// spatial requests differ by orders of magnitude (a z14 tile or a 10 m radius
// check touches a handful of index entries, a z2 tile or a 50 km radius scans
// a huge candidate set). So geotoll counts tokens, not requests: each request
// is priced before it runs, the price is withdrawn from the caller's bucket
// in one atomic step, a caller whose bucket cannot pay is refused with an
// exact Retry-After, and once the request has run its price is settled to
// what it really cost.
//
// # Cost model
//
// [Weights] prices a request with pure functions computed before any I/O
// (an estimate that needed a query of its own would add the load it is
// meant to prevent): [Weights.Read] from the features and vertices a
// density model estimates the request reads (internal/density; what toll
// prices with by default), or by the request's size alone:
//
//	read    Work.MS(features, vertices) / msPerToken, where Work.MS is
//	        QueryMS + features × FeatureMS + vertices × VertexMS
//	tile    Base + area of the tile's lon/lat bound (square degrees) × AreaWeight
//	bbox    Base + area × AreaWeight + limit × FeatureWeight
//	radius  Base + radius_km × RadiusWeight + limit × FeatureWeight
//	batch   Base + points × PointWeight
//	contains  Base + PointWeight + limit × FeatureWeight
//	cache hit: Base
//
// Every price is clamped to [Base, MaxCost] and is monotonic non-decreasing
// in area, radius, limit and points; a parent tile never costs less than any
// of its children. Garbage in never gives a cheap price out: NaN sizes are
// priced as the worst case and negative sizes as zero, so no input produces
// NaN or a price outside [Base, MaxCost]. MaxCost must stay below every
// tier's capacity, or some requests could never be admitted.
//
// # Admissions, slots and settlement
//
// A [Store] decides a [Request] — a price, a bucket ([BucketKey]: one per
// tier and caller identity, hash-tagged so Redis Cluster keeps a caller in
// one slot; an IPv6 caller's /64 bucket key is its /48 aggregate's key
// followed by ":" and its identity, so both share a slot), an in-flight
// cap, optionally an aggregate bucket — in one
// atomic step: the price is spent iff the bucket (and the aggregate) holds
// it and fewer than MaxInFlight of the caller's requests are open; then the
// request is open. A refusal spends nothing and writes nothing, except that
// a refusal by the in-flight cap first sweeps out the slots of requests
// whose TTL has passed (their process died). An admitted
// request's [Ticket] is finished exactly once when the request is done:
// [Ticket.Settle] with what it really cost refunds the difference (never
// more than it paid) or debits it — down to Request.Debt below zero, so a
// request that looked cheap and was not delays the caller's next one by
// what it really cost. Tokens stay in [-Debt, Capacity].
//
// A bucket of [Limit] {Rate, Capacity} refills at Rate tokens per second up
// to Capacity: min(capacity, tokens + elapsed × rate). A missing bucket is a
// full one.
//
// # Redis
//
// [RedisStore] keeps a caller in one string key (tokens, the time of
// Redis's TIME, expiries, the number open), a hash of its open requests
// and a hash of tombstones ([VoidKey], ":void"): the ids of admits voided
// after a call whose answer never came, so that such an admit, should it
// still reach Redis before its batch's deadline, admits nothing. All three
// are changed only by admit.lua (embedded in the binary, sent with
// EVALSHA, EVAL on NOSCRIPT). Design choices:
//
//   - One call carries a batch of operations on one caller: the requests
//     that arrive while the caller's previous call is on its way go
//     together in the next, with the settlements and releases of earlier
//     requests. A request costs at most one call on its client's path, a
//     burst of N far fewer than N, and finishing costs the client nothing.
//   - A caller whose requests come one after another is admitted in
//     process on a lease (keylease.go): tokens for several requests and
//     one in-flight slot, taken with a request's call as an admitted
//     request of its own, and given back with a later one, which replays
//     each price and settlement at its moment. On the replica that holds
//     it a lease changes no decision; other replicas see it spent until
//     it is back, and Redis lets no refill or refund fill the bucket
//     beyond its capacity less the leases out (admit.lua's L) — the
//     replay brings back the refill that cap held back, but for what
//     the caller's other writes meanwhile cut short — and no debit takes
//     it below its debt floor less the leases out, so the floor cuts a
//     debt where it would without them (the caller loses, never gains —
//     but for a refund that waits behind a lease's move: see keyLease;
//     a give-back that comes after its lease stopped counting refunds
//     nothing).
//   - The clock is Redis's own TIME, read inside the script: replica clock
//     skew cannot smear the refill.
//   - Amounts are whole micro-tokens and times whole microseconds, so the
//     script never formats a float and the stored state round-trips
//     exactly; expiries are pushed out only when they must be (KEEPTTL
//     otherwise). Measured with callgrind against a minimal bucket script.
//   - Nothing is applied twice. A finish or void of an id that is not open
//     does nothing, so finishes are resent after a failed call. A batch whose
//     answer never came may or may not have been applied; its callers were
//     told it failed and decided by the fail mode, and its admits are voided,
//     with the caller's next call or after RetryInterval: refunded if they
//     were applied, else turned away by a tombstone that holds until the
//     batch's deadline, should the batch still come. A batch that reaches
//     Redis after its deadline (by Redis's clock) admits nothing, and its
//     callers get an error, decided by the fail mode.
//   - A Redis that keeps failing costs each caller's lane fewer and fewer
//     calls: its retries wait twice as long after each failed call, up to
//     MaxRetryInterval, and a finish or void that can no longer change its
//     bucket (its request's TTL and the bucket's refill from its debt floor
//     to its capacity have passed) is dropped and counted, so that a lane
//     with nothing left to send goes; a move or a lease's give-back, which
//     carries tokens, is never dropped and keeps its lane retrying (once a
//     MaxRetryInterval). A closed Redis client leaves nothing to retry.
//   - A batch carries one shape (in-flight cap, TTL, debt floor, aggregate
//     bucket): operations of another shape wait for the next call.
//   - The arithmetic is one Go function, applyBatch (its steps in
//     batch_run.go, named after the script's), that [MemoryStore] runs and
//     the tests hold admit.lua to, operation for operation and bit for bit.
//
// # Failing over
//
// [Failover] wraps the Redis store with a circuit breaker and the fail
// mode (open, closed, local: an in-process bucket holding 1 / replicas of
// the caller's tokens, capacity, rate and in-flight cap, that starts from
// what Redis last reported of the caller). It refuses for
// free: a caller Redis refused is refused in process until its bucket
// could pay again, with no call; and it answers a peek from what it
// learnt of the bucket within PeekReuse of the primary's last answer,
// refilled, with no call either. A [FloorPeeker] (each store here) reads
// a bucket as a request's admission will load it: lifted to the
// request's debt floor, less what is leased — what /budget and a price
// preview report.
// [Global] is a budget shared by every caller, spent by each replica
// through leases of a chunk of tokens.
//
// # Results
//
// A [Result] carries what the HTTP layer needs for its headers: Remaining,
// RetryAfter (exactly ceil(deficit/rate) in whole milliseconds, so a client
// that waits that long is admitted; [Result.RetryAfterSeconds] for the
// Retry-After header) and ResetAfter (until the bucket is full again;
// [Result.ResetSeconds]).
package throttle
