// Package etag reads the conditional headers If-Match and If-None-Match
// (RFC 9110 §13.1.1, §13.1.2) once, for every route that answers them:
// tiles, TileJSON and the catalog, the fence admin, the preview's files
// and the OpenAPI document. A header that does not parse is a 400 naming
// it on each of them, before anything is priced or written.
package etag

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/geotoll/geotoll/internal/negotiate"
	"github.com/geotoll/geotoll/problem"
)

// MaxTags bounds the entity tags of one If-Match or If-None-Match, so a
// pathological header costs bounded work.
const MaxTags = negotiate.MaxHeaderItems

// List is a parsed If-Match or If-None-Match: "*" (Any), or a list of
// entity tags (RFC 9110 §8.8.3), each as sent ("7" or W/"7").
type List struct {
	Any  bool
	tags []string
}

var errSyntax = errors.New(`must be "*" or a comma-separated list of entity tags ("…" or W/"…")`)

// Parse parses the values of one If-Match or If-None-Match (RFC 9110
// §13.1.1: "*" / #entity-tag), its lines taken as one list. Empty list
// elements are skipped, as the list grammar allows; "*" must stand alone.
// Anything else — an unquoted or unterminated tag, a lower-case "w/",
// space or a control character inside the quotes, two tags without a
// comma between them, more than MaxTags tags — is an error.
func Parse(values []string) (List, error) {
	var l List
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
					return List{}, errSyntax
				}
				if len(l.tags) == MaxTags {
					return List{}, fmt.Errorf("has more than %d entity tags", MaxTags)
				}
				l.tags = append(l.tags, v[i:end])
				i = end
			}
			// After an element: spaces, then a comma or the end.
			for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
				i++
			}
			if i < len(v) && v[i] != ',' {
				return List{}, errSyntax
			}
		}
	}
	if stars > 1 || stars == 1 && len(l.tags) > 0 {
		return List{}, errors.New(`must be "*" alone or a list of entity tags, not both`)
	}
	l.Any = stars == 1
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

// MatchStrong reports whether l names etag under strong comparison (RFC
// 9110 §8.8.3.2), as If-Match compares: "*", or a tag equal to it that is
// not weak (a weak etag, or "" — a representation without one — is named
// only by "*").
func (l List) MatchStrong(etag string) bool {
	if l.Any {
		return true
	}
	for _, tag := range l.tags {
		if tag == etag && tag[0] != 'W' {
			return true
		}
	}
	return false
}

// MatchWeak reports whether l names etag under weak comparison, as
// If-None-Match compares: "*", or a tag whose opaque part equals its,
// weak or not.
func (l List) MatchWeak(etag string) bool {
	if l.Any {
		return true
	}
	if etag == "" {
		return false
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

// Conditions are a request's If-Match and If-None-Match, parsed; nil for a
// header it does not send. The zero value has none.
type Conditions struct {
	IfMatch, IfNoneMatch *List
}

// ParseConditions reads h's If-Match and If-None-Match. A header that does
// not parse is a 400 problem naming it: a condition the server cannot read
// could otherwise let a write through that its sender meant to stop, and
// is answered alike where nothing is written.
func ParseConditions(h http.Header) (Conditions, error) {
	var c Conditions
	for _, hdr := range []struct {
		name string
		dst  **List
	}{{"If-Match", &c.IfMatch}, {"If-None-Match", &c.IfNoneMatch}} {
		values := h.Values(hdr.name)
		if len(values) == 0 {
			continue
		}
		l, err := Parse(values)
		if err != nil {
			return Conditions{}, problem.Malformed(hdr.name, "%s %v", hdr.name, err)
		}
		*hdr.dst = &l
	}
	return c, nil
}

// None reports whether c has no condition.
func (c Conditions) None() bool { return c.IfMatch == nil && c.IfNoneMatch == nil }

// MatchFails reports whether If-Match is false for a representation whose
// ETag is etag ("" when it has none): the answer is then 412.
func (c Conditions) MatchFails(etag string) bool {
	return c.IfMatch != nil && !c.IfMatch.MatchStrong(etag)
}

// NoneMatchFails reports whether If-None-Match is false for etag: a 304
// to a GET or HEAD, a 412 to a write.
func (c Conditions) NoneMatchFails(etag string) bool {
	return c.IfNoneMatch != nil && c.IfNoneMatch.MatchWeak(etag)
}

// Failed evaluates c for a representation whose current ETag is etag, in
// the order of RFC 9110 §13.2.2, and returns the header whose condition is
// false, or "" when they all hold: If-Match when it names neither "*" nor
// etag (strong comparison), else If-None-Match when it names "*" or etag
// (weak comparison).
func (c Conditions) Failed(etag string) string {
	if c.MatchFails(etag) {
		return "If-Match"
	}
	if c.NoneMatchFails(etag) {
		return "If-None-Match"
	}
	return ""
}
