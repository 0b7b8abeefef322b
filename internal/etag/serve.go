package etag

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/geotoll/geotoll/problem"
)

// Of is the strong entity tag of a fixed body that Serve answers with: a
// hash of its bytes, quoted, the same in every process that serves them.
func Of(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`
}

// Serve answers a GET or HEAD of a fixed body whose ETag is tag (strong;
// Serve sets it) and whose other headers are set, with the conditions of RFC 9110
// §13.2.2 evaluated here rather than by http.ServeContent, which answers a
// failed If-Match with a bare 412 (no problem document, and
// Content-Encoding: gzip left on an empty body) and a Range it cannot
// satisfy with a plain-text 416:
//
//   - a conditional header that does not parse is a 400 problem naming it;
//   - If-Match not naming tag (strong comparison) is a 412 problem, whose
//     detail names what (as "this file");
//   - If-None-Match naming it (weak comparison) is a 304;
//   - If-Unmodified-Since and If-Modified-Since are ignored: the body has
//     no modification date (§13.1.3, §13.1.4), its ETag is its validator;
//   - Range is ignored (§14.2 lets a server): the bodies are small, sent
//     whole and often gzipped, so a 200 with the whole body answers every
//     request, and no Accept-Ranges invites one.
func Serve(w http.ResponseWriter, r *http.Request, body []byte, tag, what string) {
	c, err := ParseConditions(r.Header)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	h := w.Header()
	h.Set("ETag", tag)
	if c.MatchFails(tag) {
		problem.Write(w, r, &problem.Error{Code: problem.PreconditionFailed, Param: "If-Match",
			Detail: "If-Match does not name " + what + "'s current ETag " + tag})
		return
	}
	if c.NoneMatchFails(tag) {
		// A 304 carries no representation metadata but its validator
		// (RFC 9110 §15.4.5).
		h.Del("Content-Type")
		h.Del("Content-Encoding")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
