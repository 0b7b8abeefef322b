package tiles

import (
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/internal/negotiate"
)

// maxHeaderItems bounds the list items examined in one header, so a
// pathological header costs bounded work.
const maxHeaderItems = negotiate.MaxHeaderItems

// noneMatch reports whether If-None-Match values name a current
// representation, so the response is 304 Not Modified (RFC 9110 §13.1.2):
// "*", or an entity tag equal to one of etags under weak comparison.
func noneMatch(values []string, matches func(tag string) bool) bool {
	n := 0
	for _, v := range values {
		for _, tag := range splitETags(v) {
			if n++; n > maxHeaderItems {
				return false
			}
			if tag == "*" || matches(tag) {
				return true
			}
		}
	}
	return false
}

// matchFails reports whether If-Match values make the request's condition
// false (RFC 9110 §13.1.1), so the answer is 412 Precondition Failed: the
// header is present and names neither "*" nor etag (strong, as If-Match
// compares: a weak tag, or a weak etag, never matches; etag "" is a
// representation without one). A header with more items than
// maxHeaderItems fails too: it is not evaluated.
func matchFails(values []string, etag string) bool {
	if len(values) == 0 {
		return false
	}
	n := 0
	for _, v := range values {
		for _, tag := range splitETags(v) {
			if n++; n > maxHeaderItems {
				return true
			}
			if tag == "*" || (etag != "" && tag == etag && !strings.HasPrefix(etag, "W/")) {
				return false
			}
		}
	}
	return true
}

// splitETags splits an If-None-Match value into its entity tags. Commas
// inside a quoted opaque-tag do not split (an etagc excludes only DQUOTE,
// so a comma is legal there).
func splitETags(v string) []string {
	var out []string
	for i := 0; i < len(v); {
		switch v[i] {
		case ' ', '\t', ',':
			i++
		case '*':
			out = append(out, "*")
			i++
		default:
			start := i
			if strings.HasPrefix(v[i:], "W/") {
				i += 2
			}
			if i < len(v) && v[i] == '"' {
				end := strings.IndexByte(v[i+1:], '"')
				if end < 0 {
					return out // unterminated: the rest is garbage
				}
				i += end + 2
				out = append(out, v[start:i])
				continue
			}
			// Not an entity tag: skip to the next comma.
			next := strings.IndexByte(v[i:], ',')
			if next < 0 {
				return out
			}
			i += next + 1
		}
	}
	return out
}

// noCache reports whether a request asks not to be answered from a cache
// (RFC 9111 §5.2.1.4: Cache-Control: no-cache; or Pragma: no-cache when it
// has no Cache-Control, §5.4).
func noCache(h http.Header) bool {
	values := h.Values("Cache-Control")
	if len(values) == 0 {
		values = h.Values("Pragma")
	}
	n := 0
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if n++; n > maxHeaderItems {
				return false
			}
			if strings.EqualFold(strings.TrimSpace(item), "no-cache") {
				return true
			}
		}
	}
	return false
}
