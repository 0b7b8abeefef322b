package geofence

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/problem"
)

// acceptPost is the Accept-Post of a POST whose body's media type is
// refused: the JSON media types the geofence API reads by name. Any other
// application/*+json type is read too, which a media range cannot say
// (jsonBody's detail does).
const acceptPost = "application/json, application/geo+json"

// jsonBody refuses a request body labelled with a media type other than
// JSON: application/json, application/geo+json or any other
// application/*+json (RFC 6839), with parameters (a charset, which must
// be utf-8: JSON is UTF-8, RFC 8259 §8.1). A form, a text or a multipart
// body is not read as JSON because it happens to parse as JSON: that is
// a 415 naming Content-Type, with Accept-Post on a POST (RFC 9110
// §15.5.16), from the request's head — before the body is read, priced
// or (on the check) the key is checked: it costs nothing. A body without
// a Content-Type, or with an empty one, is read as JSON, as clients that
// send none (curl without -H, most scripts) mean it.
func jsonBody(w http.ResponseWriter, r *http.Request) error {
	vs := r.Header.Values("Content-Type")
	if len(vs) == 0 || (len(vs) == 1 && strings.TrimSpace(vs[0]) == "") {
		return nil
	}
	sent := strings.Join(vs, ", ")
	if len(vs) == 1 {
		mt, params, err := mime.ParseMediaType(vs[0])
		charset, hasCharset := params["charset"]
		if err == nil && jsonMediaType(mt) && (!hasCharset || strings.EqualFold(charset, "utf-8")) {
			return nil
		}
	}
	if r.Method == http.MethodPost {
		w.Header().Set("Accept-Post", acceptPost)
	}
	return &problem.Error{Code: problem.UnsupportedMediaType, Param: "Content-Type",
		Detail: "the body is sent as " + truncate(sent, 64) + "; send it as JSON: Content-Type application/json, application/geo+json " +
			"or another application/*+json (charset utf-8, if any), or without a Content-Type"}
}

// jsonMediaType reports whether mt, a media type without parameters as
// mime.ParseMediaType answers it (lower case), is JSON.
func jsonMediaType(mt string) bool {
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && (sub == "json" || (len(sub) > len("+json") && strings.HasSuffix(sub, "+json")))
}

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
