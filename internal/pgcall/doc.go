// Package pgcall is how geotoll calls PostgreSQL on a request's behalf:
// one guarded read, one guarded write, and connections that never let go
// of a statement that is still running.
//
// # The guarded read
//
// [DB.Read] is the only place a read-only transaction is opened on a
// request's behalf (background work — density model builds, layer checks —
// opens its own). It waits at most AcquireTimeout for a pooled
// connection, then sends, in one batch (one round trip): BEGIN READ ONLY, jit off, and for each [Statement] a
// SET LOCAL statement_timeout (set_config with a bound value) followed by
// the statement, then COMMIT. The tile renderer, TileJSON's layer
// description, every geofence read and the API key loads all go through
// it. [DB.Write] is its read-write twin for the fence admin. Every error is
// a problem (package problem): a statement cut by its timeout is a
// problem.Timeout — so is one whose GEOS call the timeout interrupted,
// which PostGIS reports as an exception GEOS threw (XX000), told apart
// from GEOS failing on the data by the statement having run its limit
// out —, a database that cannot be reached problem.Unavailable,
// and so is a statement that does not fit the database — a table, column
// or right it names is gone — with the database's reason; [Misfit] names
// the layer it was for.
//
// # Deadlines that nest
//
// A read as a whole may take the sum of its statements' timeouts, or the
// context's [Budget] if that is less: each statement runs under its own
// timeout or what the statements before it left of the read's, whichever
// is less (PostgreSQL works it out as the statement starts, from the
// transaction's start). A call is cut (cancelled by the client)
// [AnswerGrace] after that time has run out, or [StopWait] before the
// deadline of its context (a quarter of the time left, if that is less),
// whichever comes first; each statement's timeout is shortened so that
// PostgreSQL cuts it first. A call therefore answers by its context's deadline, and
// the server's request deadline, shorter than the HTTP write timeout, is
// always met with a status and a body.
//
// # No orphaned work
//
// pgx's default reaction to a cancelled context is to close the socket: the
// pool slot is free at once while the backend runs on — and a PostGIS
// function working on one huge geometry does not look at interrupts for
// minutes. [Configure] replaces it: a cancelled call sends PostgreSQL a
// cancel request and keeps its connection until the backend answers (at
// most the configured wait; not at all if the server does not acknowledge
// the cancel request within [AckWait]: a database that answers nothing
// stops nothing by being waited for — while a live one whose CPUs are all
// busy acknowledges late, and is waited for). A call whose backend has not
// stopped [StopWait] after the cut (or, its cancel request acknowledged
// late, StopWait after that; never past the caller's deadline) still
// answers — with an error that wraps [Stopping] — and its connection
// returns to the pool only once the backend has stopped (and not at all
// when its cancel request went out unacknowledged: that request may still
// arrive, late, and cancel whatever the connection ran next). A call whose
// caller went away, and whose answer nobody waits for, waits for that
// acknowledgement after its backend answered (at most AckWait), so that
// its connection serves on; the request holds what it holds that much
// longer. [Respond] lets
// an HTTP handler send that answer and then wait for the backend, so that
// whatever the request holds until its handler returns (its in-flight
// slot) is held as long as the database works for it. Running statements
// therefore never outnumber the pool.
//
// # Database time
//
// [Timing] has two clocks. Timing.DB is the client's: from sending the
// batch to receiving its last result, the backend's running time plus one
// network round trip (for a cancelled call, until the backend answered).
// Timing.Server is PostgreSQL's: a read ends its batch with
// clock_timestamp() − now(), the transaction's own time, without the round
// trip or either side's scheduling — with, on a connection's first use of
// a statement, the round trip preparing it before the transaction, which
// waits for a locked table as the statement would. A [Meter] in the context adds up the
// database time of every call made under it — Timing.Server when the call
// read it, else Timing.DB (a call cut short, a write) — including the part
// of a call that outlives its answer.
package pgcall
