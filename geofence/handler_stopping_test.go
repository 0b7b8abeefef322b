package geofence

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// stuckReader's contains fails with a timeout whose statement runs until
// stop is closed.
type stuckReader struct {
	fakeReader
	stop chan struct{}
}

func (s *stuckReader) Contains(context.Context, ContainsQuery) ([]Feature, bool, error) {
	return nil, false, pgcall.Outlast(&problem.Error{Code: problem.Timeout, Detail: "cut", RetryAfter: 6}, s.stop)
}

// A geofence query whose statement is still running when it fails is
// answered at once (503, Retry-After, a problem with its length, on a
// closing connection), and the handler — whose return frees the request's
// in-flight slot — waits for the statement to stop.
func TestHandlerAnswersThenWaitsForTheStatement(t *testing.T) {
	t.Parallel()
	reader := &stuckReader{stop: make(chan struct{})}
	h := newTestHandler(t, reader, &fakeGate{budget: 10}, nil)
	flushed := make(chan *httptest.ResponseRecorder, 1)
	returned := make(chan struct{})
	go func() {
		w := &flushRecorder{httptest.NewRecorder(), flushed}
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/geofence/contains?lng=13.4&lat=52.5", nil))
		close(returned)
	}()
	var w *httptest.ResponseRecorder
	select {
	case w = <-flushed:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer flushed while the statement runs")
	}
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "6" ||
		w.Header().Get("Connection") != "close" || w.Header().Get("Content-Length") == "" {
		t.Errorf("answer %d, headers %v; want 503, Retry-After 6, Connection: close, a Content-Length", w.Code, w.Header())
	}
	select {
	case <-returned:
		t.Fatal("the handler returned while the statement ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(reader.stop)
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not return once the statement stopped")
	}
}

// flushRecorder hands the recorder over on its first Flush.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushed chan *httptest.ResponseRecorder
}

func (f *flushRecorder) Flush() {
	select {
	case f.flushed <- f.ResponseRecorder:
	default:
	}
}
