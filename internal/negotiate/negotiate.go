// Package negotiate reads the request headers that choose a response's
// representation, with bounded work for any header.
package negotiate

import "strings"

// MaxHeaderItems bounds the list items examined in one header, so a
// pathological header costs bounded work.
const MaxHeaderItems = 64

// Codings says which of the two content codings geotoll sends a client's
// Accept-Encoding allows (RFC 9110 §12.5.3).
type Codings struct {
	// Gzip: a gzip-coded response is acceptable — "gzip" or "x-gzip" with
	// a non-zero q, or "*" with a non-zero q when gzip is not named.
	Gzip bool
	// Identity: a response without a content coding is acceptable, as it
	// is unless "identity;q=0" or "*;q=0" (identity not named) refuses it.
	Identity bool
}

// Accepted reads Accept-Encoding values. An explicit q=0 for a coding wins
// over "*". No header allows identity and not gzip (a client that says
// nothing may not decode it), and so does an empty one (RFC 9110: it wants
// no content coding). A header of more than MaxHeaderItems items is not
// read past them: it allows identity only.
func Accepted(values []string) Codings {
	var gzip, identity, star *bool
	n := 0
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if n++; n > MaxHeaderItems {
				return Codings{Identity: true}
			}
			coding, params, _ := strings.Cut(item, ";")
			q := positiveQ(params)
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				// A refusal of either name refuses gzip.
				if gzip == nil || !q {
					gzip = &q
				}
			case "identity":
				if identity == nil || !q {
					identity = &q
				}
			case "*":
				star = &q
			}
		}
	}
	c := Codings{Identity: true}
	switch {
	case gzip != nil:
		c.Gzip = *gzip
	case star != nil:
		c.Gzip = *star
	}
	switch {
	case identity != nil:
		c.Identity = *identity
	case star != nil:
		c.Identity = *star
	}
	return c
}

// SendGzip reports whether a response that can be sent either way goes
// gzip-coded: when gzip is acceptable and either the server prefers it
// (preferGzip: it makes the response smaller) or identity is refused.
// When neither coding is acceptable the response goes without a content
// coding: RFC 9110 §12.5.3 says an origin server ought to respond without
// one when none of its codings is acceptable (rather than 406 or 415).
func (c Codings) SendGzip(preferGzip bool) bool {
	return c.Gzip && (preferGzip || !c.Identity)
}

// AcceptsGzip reports whether Accept-Encoding values allow a gzip-coded
// response (Accepted(values).Gzip).
func AcceptsGzip(values []string) bool { return Accepted(values).Gzip }

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
