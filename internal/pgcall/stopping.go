package pgcall

import (
	"errors"
	"net/http"
)

// Stopping wraps the error of a call that answered while its backend was
// still working: the statement was cut (or its caller went away) and did
// not stop within StopWait. Its connection goes back to the pool only once
// the backend has stopped; Wait waits for that.
type Stopping struct {
	Err  error // why the call answered without its result
	done <-chan struct{}
}

func (s *Stopping) Error() string {
	return s.Err.Error() + " (the statement is still running; its connection is held until it stops)"
}

func (s *Stopping) Unwrap() error { return s.Err }

// Wait blocks until the work has stopped.
func (s *Stopping) Wait() { <-s.done }

// Outlast returns err marked as outlived by work that ends when done is
// closed, so that WaitStopped(err) — and Respond — also wait for it. It is
// for errors that stand in for a call's: a request that gave up waiting for
// a render it shares with others still owes the database's time if it was
// the last one waiting.
func Outlast(err error, done <-chan struct{}) error { return &Stopping{Err: err, done: done} }

// WaitStopped blocks until the work behind every Stopping in err's chain
// has stopped. It returns at once for any other error.
func WaitStopped(err error) {
	for {
		var s *Stopping
		if !errors.As(err, &s) {
			return
		}
		s.Wait()
		err = s.Err
	}
}

// Respond writes an error response with write and, when err says that a
// statement behind it is still running, sends that response at once and
// then waits for the statement to stop. The response is flushed and marked
// Connection: close, so the client has its whole answer (write must set a
// Content-Length) and does not queue its next request behind the wait,
// while the handler — and whatever its request holds until the handler
// returns, such as its in-flight slot — waits for the database.
func Respond(w http.ResponseWriter, err error, write func()) {
	var s *Stopping
	if !errors.As(err, &s) {
		write()
		return
	}
	w.Header().Set("Connection", "close")
	write()
	_ = http.NewResponseController(w).Flush()
	WaitStopped(err)
}
