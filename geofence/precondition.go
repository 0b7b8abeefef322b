package geofence

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/geotoll/geotoll/internal/negotiate"
	"github.com/geotoll/geotoll/problem"
)

// fenceETag is the entity tag of a fence at a revision: strong, the
// revision quoted. A revision is the number of the write that last changed
// the fence (see migration 10), so the tag changes on every write and only
// then, and reads the same on every replica.
func fenceETag(revision int64) string { return `"` + strconv.FormatInt(revision, 10) + `"` }

// maxETags bounds the entity tags of one If-Match or If-None-Match, so a
// pathological header costs bounded work.
const maxETags = negotiate.MaxHeaderItems

// etagList is a parsed If-Match or If-None-Match: "*", or a list of entity
// tags (RFC 9110 §8.8.3), each as sent ("7" or W/"7").
type etagList struct {
	any  bool
	tags []string
}

var errETags = errors.New(`must be "*" or a comma-separated list of entity tags ("…" or W/"…")`)

// parseETags parses the values of one If-Match or If-None-Match (RFC 9110
// §13.1.1: "*" / #entity-tag), its lines taken as one list. Empty list
// elements are skipped, as the list grammar allows; "*" must stand alone.
// Anything else — an unquoted or unterminated tag, a lower-case "w/",
// space or a control character inside the quotes, more than maxETags tags
// — is an error.
func parseETags(values []string) (etagList, error) {
	var l etagList
	stars := 0
	for _, v := range values {
		for i := 0; i < len(v); {
			switch v[i] {
			case ' ', '\t', ',':
				i++
				continue
			case '*':
				stars++
				i++
			default:
				end, ok := entityTag(v, i)
				if !ok {
					return etagList{}, errETags
				}
				if len(l.tags) == maxETags {
					return etagList{}, fmt.Errorf("has more than %d entity tags", maxETags)
				}
				l.tags = append(l.tags, v[i:end])
				i = end
			}
			// After an element: spaces, then a comma or the end.
			for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
				i++
			}
			if i < len(v) && v[i] != ',' {
				return etagList{}, errETags
			}
		}
	}
	if stars > 1 || stars == 1 && len(l.tags) > 0 {
		return etagList{}, errors.New(`must be "*" alone or a list of entity tags, not both`)
	}
	l.any = stars == 1
	return l, nil
}

// entityTag returns the end of the entity tag that starts at v[i], and
// whether there is one: [ "W/" ] DQUOTE *etagc DQUOTE, where etagc is any
// byte but a control, space, DQUOTE or DEL.
func entityTag(v string, i int) (int, bool) {
	if len(v)-i >= 2 && v[i:i+2] == "W/" {
		i += 2
	}
	if i >= len(v) || v[i] != '"' {
		return 0, false
	}
	for i++; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			return i + 1, true
		case c <= ' ' || c == 0x7f:
			return 0, false
		}
	}
	return 0, false
}

// matchStrong reports whether l names etag, a strong tag, under strong
// comparison (RFC 9110 §8.8.3.2), as If-Match compares: "*", or a tag
// equal to it that is not weak.
func (l etagList) matchStrong(etag string) bool {
	if l.any {
		return true
	}
	for _, tag := range l.tags {
		if tag == etag && tag[0] != 'W' {
			return true
		}
	}
	return false
}

// matchWeak reports whether l names etag under weak comparison, as
// If-None-Match compares: "*", or a tag whose opaque part equals its,
// weak or not.
func (l etagList) matchWeak(etag string) bool {
	if l.any {
		return true
	}
	etag = opaque(etag)
	for _, tag := range l.tags {
		if opaque(tag) == etag {
			return true
		}
	}
	return false
}

func opaque(tag string) string {
	if len(tag) > 2 && tag[:2] == "W/" {
		return tag[2:]
	}
	return tag
}

// Preconditions are a fence request's If-Match and If-None-Match (RFC 9110
// §13.1.1, §13.1.2), parsed; the zero value has none. The store checks a
// write's against the fence's current ETag under the row's lock, in the
// write's own transaction, so that no other write comes between the check
// and the write. If-Modified-Since and If-Unmodified-Since are not
// evaluated (the fence admin sends no Last-Modified).
type Preconditions struct {
	ifMatch, ifNoneMatch *etagList
}

// ParsePreconditions reads r's If-Match and If-None-Match. A header that
// does not parse is a 400 naming it: a condition the server cannot read
// could otherwise let a write through that its sender meant to stop.
func ParsePreconditions(h http.Header) (Preconditions, error) {
	var p Preconditions
	for _, c := range []struct {
		name string
		dst  **etagList
	}{{"If-Match", &p.ifMatch}, {"If-None-Match", &p.ifNoneMatch}} {
		values := h.Values(c.name)
		if len(values) == 0 {
			continue
		}
		l, err := parseETags(values)
		if err != nil {
			return Preconditions{}, problem.Malformed(c.name, "%s %v", c.name, err)
		}
		*c.dst = &l
	}
	return p, nil
}

// none reports whether p has no condition.
func (p Preconditions) none() bool { return p.ifMatch == nil && p.ifNoneMatch == nil }

// failed evaluates p for a fence whose current ETag is etag, in the order
// of RFC 9110 §13.2.2, and returns the header whose condition is false, or
// "" when they all hold: If-Match when it names neither "*" nor etag
// (strong comparison), else If-None-Match when it names "*" or etag (weak
// comparison).
func (p Preconditions) failed(etag string) string {
	if p.ifMatch != nil && !p.ifMatch.matchStrong(etag) {
		return "If-Match"
	}
	if p.ifNoneMatch != nil && p.ifNoneMatch.matchWeak(etag) {
		return "If-None-Match"
	}
	return ""
}

// failedOnCollection evaluates p for the collection of fences, which a
// POST writes to: it exists but has no ETag, so If-Match holds only as
// "*" and If-None-Match "*" never does (RFC 9110 §13.1.1, §13.1.2). It
// returns the header whose condition is false, or "".
func (p Preconditions) failedOnCollection() string {
	if p.ifMatch != nil && !p.ifMatch.any {
		return "If-Match"
	}
	if p.ifNoneMatch != nil && p.ifNoneMatch.any {
		return "If-None-Match"
	}
	return ""
}

// preconditionFailed is the 412 of a fence request whose header named the
// fence's current state falsely; write says it was a write, which did not
// happen.
func preconditionFailed(id int64, header string, write bool) error {
	detail := fmt.Sprintf("fence %d is not at an ETag If-Match names (compared strongly: a weak W/ tag never matches); "+
		"it has changed since that ETag was read", id)
	if header == "If-None-Match" {
		detail = fmt.Sprintf("fence %d exists, at an ETag If-None-Match names (or it names *)", id)
	}
	if write {
		detail += ": nothing was written"
		if header == "If-Match" {
			detail += "; GET the fence again and reapply the change to it"
		}
	}
	return &problem.Error{Code: problem.PreconditionFailed, Param: header, Detail: detail}
}

// collectionPreconditionFailed is the 412 of a request to the collection
// of fences whose header cannot hold for it (see failedOnCollection);
// write says it was a write, which did not happen.
func collectionPreconditionFailed(header string, write bool) error {
	detail := header + " cannot hold for the collection of fences, which has no ETag (If-Match holds only as *, If-None-Match * never)"
	if write {
		detail += ": nothing was written"
	}
	return &problem.Error{Code: problem.PreconditionFailed, Param: header, Detail: detail}
}
