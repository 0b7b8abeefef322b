package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/toll"
)

// recorder remembers the status and size of a response. Unwrap lets
// http.ResponseController reach the underlying writer's Flush and deadlines.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	// ctx is the request's; gone records that its client had hung up
	// when the head was written (see answered).
	ctx  context.Context
	gone bool
}

func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 {
		rec.head(code)
	}
	rec.ResponseWriter.WriteHeader(code)
}

// head records the answer's status, and whether its client had gone. A
// 408 answers a body that did not arrive by the read deadline: net/http
// cancels a request's context on any read error of its connection, the
// deadline's too, so there the cancel says nothing of the client, which
// is most often still waiting for the answer.
func (rec *recorder) head(code int) {
	rec.status = code
	rec.gone = code != http.StatusRequestTimeout && rec.ctx != nil && errors.Is(rec.ctx.Err(), context.Canceled)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.head(http.StatusOK)
	}
	n, err := rec.ResponseWriter.Write(b)
	rec.bytes += int64(n)
	return n, err
}

func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

type ctxKey int

const requestIDKey ctxKey = iota

// RequestID returns the request's id (set by the middleware), or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// withRequestID takes a sane X-Request-ID from the client or makes one, and
// echoes it on the response. One with the mark of an API key is not
// taken: it would be written in every log line of the request.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !validRequestID.MatchString(id) || apikeys.HoldsMark(id) {
			id = newID()
		}
		w.Header().Set("X-Request-ID", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// newID returns 16 random hex digits.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cost is what the access log says a request cost: its settled charge
// (the charge of a statement that outlived the answer included), else
// the X-Request-Cost it was answered with (a refusal's price, a dry run's).
func cost(rec *recorder, charged *toll.CallerNote) string {
	if c := charged.Charged(); c != "" {
		return c
	}
	return rec.Header().Get("X-Request-Cost")
}

// withAccessLog logs one line per request, with secrets in the query
// (?key=) redacted, and recovers panics into a 500 problem.
func withAccessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, ctx: r.Context()}
		var charged toll.CallerNote
		r = r.WithContext(toll.WithCallerNote(r.Context(), &charged))
		defer func() {
			aborted := false
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.LogAttrs(r.Context(), slog.LevelError, "panic",
					slog.Any("panic", v), slog.String("stack", string(debug.Stack())),
					slog.String("request_id", RequestID(r.Context())))
				if rec.status == 0 {
					problem.Write(rec, r, problem.Wrap(nil))
				} else {
					// Its head is sent: the answer cannot become a 500, and
					// the client must not take what was written for all of
					// it — the connection is cut (http.ErrAbortHandler).
					aborted = true
				}
			}
			status := answered(rec, r)
			defer func() {
				if aborted {
					panic(http.ErrAbortHandler)
				}
			}()
			msg := "request"
			if aborted {
				msg = "request cut short by a panic"
			}
			attrs := make([]slog.Attr, 0, 12)
			attrs = append(attrs,
				slog.String("method", r.Method),
				slog.String("path", apikeys.RedactPath(r.URL.Path)),
				slog.String("query", RedactQuery(r.URL.RawQuery)),
				slog.Int("status", status),
				slog.Int64("bytes", rec.bytes),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
				slog.String("cost", cost(rec, &charged)),
				slog.String("remote", r.RemoteAddr),
			)
			if caller, tier := charged.Read(); caller != "" {
				attrs = append(attrs, slog.String("caller", caller), slog.String("tier", tier))
			}
			log.LogAttrs(r.Context(), slog.LevelInfo, msg, append(attrs, slog.String("request_id", RequestID(r.Context())))...)
		}()
		next.ServeHTTP(rec, r)
	})
}

// RedactQuery hides the values of secret query parameters: key (the one
// geotoll takes), parameters other services take keys in (api_key, apikey,
// access_token, token), each in any case, and any parameter one of whose
// values holds the mark of a geotoll key anywhere — a key sent under a
// misspelt name, or after a space, is not taken, but it is still a
// secret. A parameter whose name holds the mark (a bare key, "?gt_…", as
// a URL template filled with the key alone sends it; "key%3Dgt_…", its
// equals sign encoded) is logged as REDACTED, name and value.
func RedactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "(unparsable)"
	}
	for k, vs := range q {
		switch {
		case apikeys.HoldsMark(k):
			delete(q, k)
			q["REDACTED"] = []string{"REDACTED"}
		case secretParam(k) || slices.ContainsFunc(vs, apikeys.HoldsMark):
			q[k] = []string{"REDACTED"}
		}
	}
	return q.Encode()
}

// secretParam reports whether a query parameter of this name holds a key.
func secretParam(name string) bool {
	for _, s := range []string{"key", "api_key", "apikey", "access_token", "token"} {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}
