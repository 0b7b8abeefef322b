package geofence

import (
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
