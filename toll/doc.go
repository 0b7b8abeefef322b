// Package toll is geotoll's HTTP-facing budget policy: it identifies who
// pays for a request, prices it, charges the price before anything runs,
// settles it once the request has run, and writes the budget headers and
// refusals. It is the Gate of the tiles and geofence handlers.
//
// # A request's way through the toll
//
//  0. [Toll.Charge] reads ?dry_run first: a value other than 1, true, 0
//     or false, the parameter given twice, or a query string that does
//     not parse is a 400 that charges nothing (not even a failed-auth
//     token), never a request run in place of its preview.
//  1. It identifies the caller: an API key (X-API-Key,
//     Authorization: Bearer, or ?key=) from the in-memory key ring names a
//     tier; no key is the anonymous tier, bucketed by client address (IPv6
//     by /64, with an aggregate bucket per /48; 6to4 and Teredo count as
//     the IPv4 client they carry). An unknown key is a 401 charged to the
//     client address's failed-auth bucket (a 503 to try again, charged
//     alike, for a string of a key's shape while the server has never
//     read its keys); no bucket is ever made for the key itself.
//  2. The price (computed by the caller from the request's parameters,
//     never a database call) is checked against the tier: a price no
//     bucket of the tier could ever pay is a 422; ?dry_run=1 (or true)
//     answers the price and the budget without charging.
//  3. The global database budget, when configured, is taken in process
//     from this replica's lease (see throttle.Global); a refusal is a 503
//     that charges the caller nothing.
//  4. The caller's bucket pays, atomically with its in-flight cap and its
//     aggregate: one throttle.Store admission, which with Redis is at most
//     one call on the client's path (throttle.RedisStore). A refusal is a
//     429 with an exact Retry-After; shadow mode waives the bucket only.
//     With a [Tarpit], the bucket's 429 is held until the bucket could pay
//     (at most MaxHold), and its Retry-After is what remains.
//  5. The admitted request carries a Pass in its context until it ends:
//     [Finish], the middleware, settles it (or releases it at its price)
//     after the handler returns — never on the client's path.
//
// Every priced response carries the budget headers: RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers), X-RateLimit-Limit,
// -Remaining and -Reset, and X-Request-Cost.
//
// Which store decides — Redis, or by the fail mode an in-process bucket,
// nobody, or a 503 — is throttle.Failover's business, decided there once.
package toll
