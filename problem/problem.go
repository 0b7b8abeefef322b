// Package problem carries geotoll's errors from where they happen to the
// HTTP response, as RFC 9457 "application/problem+json" documents.
//
// An error is an *Error with a Code. One table (Status) maps codes to HTTP
// statuses, so handlers never choose a status by hand. Internal errors reach
// the client only as "internal error"; their detail is for the log.
//
//	if z > maxZoom {
//		return problem.Range("z", "z must be between 0 and 22")
//	}
package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
)

// ContentType is the media type of a problem document (RFC 9457).
const ContentType = "application/problem+json"

// Code classifies an error; Status maps it to an HTTP status.
type Code string

// Error codes. Each maps to one HTTP status.
const (
	Invalid      Code = "invalid"      // 400: malformed input
	Unauthorized Code = "unauthorized" // 401: unknown or revoked API key
	Forbidden    Code = "forbidden"    // 403
	NotFound     Code = "not-found"    // 404: unknown layer, unknown route
	NotAllowed   Code = "not-allowed"  // 405
	// PreconditionFailed is a 412: an If-Match or If-None-Match named the
	// target's current state falsely, and nothing was written.
	PreconditionFailed Code = "precondition-failed"
	TooLarge           Code = "too-large" // 413: request body over the limit
	// RequestTimeout is a 408: the request body did not arrive within the
	// server's read timeout.
	RequestTimeout Code = "request-timeout"
	// UnsupportedMediaType is a 415: a body with a Content-Type other than
	// JSON, or in a content coding (gzip…), that the route does not read.
	UnsupportedMediaType Code = "unsupported-media-type"
	OutOfRange           Code = "out-of-range"   // 422: well formed, but outside its bounds
	Exhausted            Code = "quota-exceeded" // 429: the caller's budget cannot pay the price
	// ReducedCapacity is a 503: the budget shared by every caller (the
	// database's) is spent; the caller's own was not charged.
	ReducedCapacity Code = "temporary-reduced-capacity"
	Internal        Code = "internal"    // 500: a bug; detail is never shown
	Unavailable     Code = "unavailable" // 503: database overloaded, timed out or down
	Timeout         Code = "timeout"     // 503: the query hit statement_timeout
)

var statuses = map[Code]int{
	Invalid:              http.StatusBadRequest,
	Unauthorized:         http.StatusUnauthorized,
	Forbidden:            http.StatusForbidden,
	NotFound:             http.StatusNotFound,
	NotAllowed:           http.StatusMethodNotAllowed,
	PreconditionFailed:   http.StatusPreconditionFailed,
	TooLarge:             http.StatusRequestEntityTooLarge,
	RequestTimeout:       http.StatusRequestTimeout,
	UnsupportedMediaType: http.StatusUnsupportedMediaType,
	OutOfRange:           http.StatusUnprocessableEntity,
	Exhausted:            http.StatusTooManyRequests,
	ReducedCapacity:      http.StatusServiceUnavailable,
	Internal:             http.StatusInternalServerError,
	Unavailable:          http.StatusServiceUnavailable,
	Timeout:              http.StatusServiceUnavailable,
}

// Status returns the HTTP status for code; unknown codes are 500.
func Status(code Code) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is an error that knows how to present itself to a client.
type Error struct {
	Code   Code
	Detail string // human readable, safe to show (not for Internal)
	Param  string // the request parameter at fault, if any
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int
	// Extra members of the problem document (RFC 9457 §3.2 extensions).
	Extra map[string]any
	// Err is the cause, logged and never shown.
	Err error
}

func (e *Error) Error() string {
	msg := string(e.Code)
	if e.Param != "" {
		msg += " " + e.Param
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Malformed is a 400 naming the parameter.
func Malformed(param, format string, args ...any) *Error {
	return &Error{Code: Invalid, Param: param, Detail: fmt.Sprintf(format, args...)}
}

// Range is a 422 naming the parameter.
func Range(param, format string, args ...any) *Error {
	return &Error{Code: OutOfRange, Param: param, Detail: fmt.Sprintf(format, args...)}
}

// Missing is a 404.
func Missing(param, format string, args ...any) *Error {
	return &Error{Code: NotFound, Param: param, Detail: fmt.Sprintf(format, args...)}
}

// Wrap marks err as internal: the client sees only "internal error".
func Wrap(err error) *Error { return &Error{Code: Internal, Err: err} }

// From returns err as an *Error, treating anything else as Internal.
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Wrap(err)
}

// TypeBase prefixes each problem type URI. Types are stable identifiers
// documented in the README ("Errors").
const TypeBase = "urn:geotoll:problem:"

// IANATypeBase prefixes the problem types registered in IANA's HTTP
// Problem Types registry (draft-ietf-httpapi-ratelimit-headers):
// quota-exceeded and temporary-reduced-capacity.
const IANATypeBase = "https://iana.org/assignments/http-problem-types#"

// Type is the problem type URI of code: the registered one for
// Exhausted and ReducedCapacity, TypeBase+code for the others.
func Type(code Code) string {
	switch code {
	case Exhausted, ReducedCapacity:
		return IANATypeBase + string(code)
	}
	return TypeBase + string(code)
}

// Write sends err as a problem document. Internal errors show no detail.
func Write(w http.ResponseWriter, r *http.Request, err error) {
	e := From(err)
	status := Status(e.Code)
	doc := map[string]any{
		"type":   Type(e.Code),
		"title":  http.StatusText(status),
		"status": status,
	}
	if e.Code == Internal {
		doc["detail"] = "internal error"
	} else if e.Detail != "" {
		doc["detail"] = e.Detail
	}
	if e.Param != "" {
		doc["param"] = e.Param
	}
	if r != nil {
		doc["instance"] = r.URL.EscapedPath() // a URI reference (RFC 9457): escaped, never the decoded path
	}
	full := doc
	if len(e.Extra) > 0 {
		full = make(map[string]any, len(doc)+len(e.Extra))
		for k, v := range e.Extra {
			full[k] = v
		}
		maps.Copy(full, doc) // the standard members win
	}
	body, ok := appendDocument(make([]byte, 0, 512), full)
	if !ok {
		var err error
		if body, err = json.Marshal(full); err != nil { // an Extra member that cannot be encoded: leave them out
			body, _ = json.Marshal(doc) // strings and ints only: cannot fail
		}
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", ContentType)
	// A length, so that a client has the whole problem as soon as it is
	// flushed, even if the handler goes on (see pgcall.Respond).
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Encoding")
	h.Del("ETag")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
