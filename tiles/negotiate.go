package tiles

import (
	"net/http"
	"strings"
)

// maxHeaderItems bounds the list items examined in one header, so a
// pathological header costs bounded work.
const maxHeaderItems = 64

// acceptsGzip reports whether Accept-Encoding values allow a gzip-coded
// response (RFC 9110 §12.5.3): "gzip" or "x-gzip" with a non-zero q, or "*"
// with a non-zero q when gzip is not named. No header means no gzip (a
// client that says nothing may not decode it).
func acceptsGzip(values []string) bool {
	star, named := false, false
	n := 0
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if n++; n > maxHeaderItems {
				return false
			}
			coding, params, _ := strings.Cut(item, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			switch coding {
			case "gzip", "x-gzip":
				if !positiveQ(params) {
					return false // an explicit refusal wins over "*"
				}
				named = true
			case "*":
				star = positiveQ(params)
			}
		}
	}
	return named || star
}

// positiveQ reports whether the parameters of one Accept-Encoding item give
// it a weight above zero. A missing q is 1; a malformed q is taken as 0.
func positiveQ(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		v = strings.TrimSpace(v)
		// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
		if v == "" || len(v) > 5 || (v[0] != '0' && v[0] != '1') {
			return false
		}
		if len(v) > 1 && v[1] != '.' {
			return false
		}
		nonzero := v[0] == '1'
		for i := 2; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return false
			}
			if v[i] != '0' {
				if v[0] == '1' {
					return false // above 1
				}
				nonzero = true
			}
		}
		return nonzero
	}
	return true
}

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
