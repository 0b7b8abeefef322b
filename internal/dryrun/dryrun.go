// Package dryrun reads the dry_run query parameter, which asks for a
// price preview instead of the request itself; the one reading of it for
// every route, priced or not.
package dryrun

import (
	"net/http"
	"net/url"

	"github.com/geotoll/geotoll/problem"
)

// Parse reads ?dry_run: 1 or true asks for the price preview; 0,
// false or no parameter for the request itself. Any other value, the
// parameter given twice, or a query string that does not parse (where
// dry_run cannot be told) is a 400: a caller who asked for a price in
// another spelling must not have the request run and charged instead.
func Parse(r *http.Request) (bool, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return false, problem.Malformed("", "the query string is malformed")
	}
	return Values(q)
}

// Values is Parse of a query string already parsed.
func Values(q url.Values) (bool, error) {
	vs := q["dry_run"]
	switch {
	case len(vs) == 0:
		return false, nil
	case len(vs) > 1:
		return false, problem.Malformed("dry_run", "dry_run is given %d times", len(vs))
	}
	v := vs[0]
	switch v {
	case "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	if len(v) > 16 {
		v = v[:16] + "…"
	}
	return false, problem.Malformed("dry_run", "dry_run must be 1 or true (0 or false: no preview), got %q", v)
}
