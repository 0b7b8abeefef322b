// Package throttle protects the database by charging every request what it
// will cost, from a per-client token bucket.
//
// A flat requests-per-second limit assumes every request costs the same;
// spatial requests differ by orders of magnitude (a z14 tile or a 10 m radius
// check touches a handful of index entries, a z2 tile or a 50 km radius scans
// a huge candidate set). So geotoll counts tokens, not requests: each request
// is priced from its own parameters, the price is withdrawn from the caller's
// bucket in one atomic step, and a caller whose bucket cannot pay gets 429
// with an exact Retry-After.
//
// # Cost model
//
// [Weights] prices a request with pure functions of its parameters, computed
// before any I/O (an estimate that needed a query of its own would add the
// load it is meant to prevent):
//
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
// tier's capacity, or some requests could never be admitted; the server
// rejects out-of-range parameters with 422 before pricing, so a single
// request can neither drain a whole budget unexpectedly nor wait forever.
// [DefaultWeights] documents how the default weights were chosen.
//
// # Bucket semantics
//
// A [Store] holds one bucket per key ([BucketKey]: one per tier and caller
// identity, hash-tagged so Redis Cluster keeps each bucket in one slot;
// keys that must share a slot share a hash tag — an IPv6 caller's /64
// bucket is its /48 aggregate's key followed by ":" and its identity, and
// [SlotKey] is the bucket key followed by ":inflight"). A
// bucket with [Limit] {Rate, Capacity} holds at most Capacity tokens and
// refills at Rate tokens per second. [Store.Spend] refills the bucket for the
// time elapsed, min(capacity, tokens + elapsed × rate), then admits the
// request iff the bucket holds at least its cost, and only then deducts it.
// Tokens never go negative and never exceed capacity.
//
// [RedisStore] does this in bucket.lua (embedded in the binary), in one
// round trip: EVALSHA, falling back to EVAL when Redis answers NOSCRIPT
// (after a restart, a failover or SCRIPT FLUSH). Design choices:
//
//   - The clock is Redis's own TIME, read inside the script. Time passed in
//     by the caller would make every geotoll replica's clock skew smear the
//     refill rate (a replica running ahead hands out tokens early).
//   - A rejection writes nothing. The refill is linear and, because
//     tokens < cost <= capacity, was not capped, so recomputing it later from
//     the old state gives the same tokens: writing would change nothing but
//     cost a write, replicate it, and create keys for callers that were only
//     ever refused. A Peek writes nothing either, so GET /budget never
//     creates a bucket.
//   - An admitted spend stores {tokens, ts} and sets PEXPIRE to the time the
//     bucket takes to refill from empty ([Limit.FillTime]); an idle bucket
//     then vanishes, which is exactly right because a missing bucket is a
//     full one.
//   - The remaining tokens travel back as a string ("%.17g"), and are stored
//     that way: Lua numbers become integers in replies (9.75 would arrive as
//     9) and redis.call formats numbers with only 14 digits, so neither would
//     round-trip.
//   - The reply is checked element by element: a malformed reply is an
//     error, never a panic.
//   - A spend under a context deadline carries that deadline plus
//     [RedisStore.ClockSkew]; the script drops a spend that arrives later
//     (error GEOTOLL_LATE). Its caller has given up by then and may have
//     charged a fallback bucket: a spend left in a paused Redis's socket
//     buffer must not charge a second time when Redis resumes.
//
// [MemoryStore] runs the same algorithm in process, for a single instance
// without Redis or as a fallback when Redis fails. The arithmetic (refill,
// admit, retry and reset times) is one Go function that MemoryStore uses and
// the tests hold bucket.lua to, operation for operation, so the two cannot
// drift: for the same calls at the same times they give the same Results.
//
// # Results
//
// A [Result] carries what the HTTP layer needs for its headers: Remaining,
// RetryAfter (exactly ceil(deficit/rate) in whole milliseconds, so a client
// that waits that long is admitted; [Result.RetryAfterSeconds] for the
// Retry-After header) and ResetAfter (until the bucket is full again;
// [Result.ResetSeconds]).
package throttle
