// Package negotiate reads the request headers that choose a response's
// representation, with bounded work for any header.
package negotiate

import "strings"

// MaxHeaderItems bounds the list items examined in one header, so a
// pathological header costs bounded work.
const MaxHeaderItems = 64

// AcceptsGzip reports whether Accept-Encoding values allow a gzip-coded
// response (RFC 9110 §12.5.3): "gzip" or "x-gzip" with a non-zero q, or "*"
// with a non-zero q when gzip is not named. No header means no gzip (a
// client that says nothing may not decode it).
func AcceptsGzip(values []string) bool {
	star, named := false, false
	n := 0
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if n++; n > MaxHeaderItems {
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
