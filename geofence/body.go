package geofence

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/problem"
)

// plainBody refuses a request body sent in a content coding: the JSON
// bodies of the geofence API (check, fence writes) are read as they are
// sent, and a gzip body read as JSON would be malformed at best and
// misread at worst. Content-Encoding absent or identity passes; any other
// coding is a 415 with Accept-Encoding: identity (RFC 9110 §15.5.16),
// before the body is read or the request priced.
func plainBody(w http.ResponseWriter, r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.TrimSpace(c)
			if c == "" || strings.EqualFold(c, "identity") {
				continue
			}
			w.Header().Set("Accept-Encoding", "identity")
			return &problem.Error{Code: problem.UnsupportedMediaType, Param: "Content-Encoding",
				Detail: "the body is in content coding " + truncate(c, 32) + "; send it without a content coding (Content-Encoding absent or identity)"}
		}
	}
	return nil
}

// requestBody returns r's JSON body for a parser, bounded by limit bytes:
// a coded body is a 415 (plainBody); a body whose Content-Length is over
// limit is a 413 from the request's head, before a byte of it is read — a
// client that sent Expect: 100-continue is not invited to upload it, one
// that waits for an answer before sending is not kept waiting for it —
// and the connection is closed after the answer rather than read to its
// end; any other body is read through an http.MaxBytesReader, so one sent
// without a length (chunked) is a 413 where it passes the limit.
func requestBody(w http.ResponseWriter, r *http.Request, limit int64) (io.Reader, error) {
	if err := plainBody(w, r); err != nil {
		return nil, err
	}
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return nil, &problem.Error{Code: problem.TooLarge, Param: "body",
			Detail: fmt.Sprintf("the body is larger than %d bytes", limit)}
	}
	return http.MaxBytesReader(w, r.Body, limit), nil
}
