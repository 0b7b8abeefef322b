package tiles

import (
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/internal/negotiate"
)

// maxHeaderItems bounds the list items examined in one header, so a
// pathological header costs bounded work.
const maxHeaderItems = negotiate.MaxHeaderItems

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
