package geofence

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/problem"
)

// query is a request's query string with each parameter at most once.
type query url.Values

// The query parameters each request reads: the ones of its own, the
// dry_run of a priced request and the ?key= the toll reads on it.
var (
	withinParams   = priced("layer", "lng", "lat", "radius", "limit")
	bboxParams     = priced("layer", "bbox", "limit")
	containsParams = priced("layer", "lng", "lat", "limit")
	checkParams    = priced("layer")
	listParams     = []string{"limit", "after"}
	writeParams    = []string{"dry_run"} // refused unless 0 or false: noDryRun
)

// priced is the parameters of a priced request: its own, dry_run and key.
func priced(own ...string) []string { return append(own, "dry_run", "key") }

// parseQuery parses r's query string, in which a parameter the request
// does not read (reads) is a 400 naming it: a misspelt optional one
// (layr=, limt=, dryrun=) would otherwise leave its default in place — a
// contains answered from the fences instead of the layer asked for, a
// fence deleted by a caller who meant to try it. The first such name, in
// order, is the one named.
func parseQuery(r *http.Request, reads []string) (query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, problem.Malformed("", "the query string is malformed")
	}
	for name := range v {
		if !slices.Contains(reads, name) {
			names := slices.Sorted(maps.Keys(v))
			first := names[slices.IndexFunc(names, func(n string) bool { return !slices.Contains(reads, n) })]
			return nil, unread(first, reads)
		}
	}
	return query(v), nil
}

// unread is the 400 for a name the request does not read, shown as
// truncate shows text (valid UTF-8, cut to maxShownParam bytes at most), the same
// in the problem's param and detail; an API key sent as a name (a URL
// template filled with the key alone) is not shown at all.
func unread(name string, reads []string) error {
	what := "reads no query parameter"
	if len(reads) > 0 {
		what = "reads " + strings.Join(reads, ", ")
	}
	if apikeys.Marked(name) {
		return problem.Malformed("", "a parameter named with an API key is not a parameter of this request, which %s", what)
	}
	// Cut at a character's start, so that no half of one shows as U+FFFD;
	// the same text in param and detail (JSON escapes both alike).
	n := maxShownParam
	for n > 0 && n < len(name) && !utf8.RuneStart(name[n]) {
		n--
	}
	shown := truncate(name, n)
	return problem.Malformed(shown, "\"%s\" is not a parameter of this request, which %s", shown, what)
}

// maxShownParam is how much of an unknown parameter's name a 400 repeats.
const maxShownParam = 64

// get returns the single value of name ("" when absent); a parameter given
// twice is a 400, so that no two parts of the stack can read different
// values.
func (q query) get(name string) (string, error) {
	vs := q[name]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", problem.Malformed(name, "%s is given %d times", name, len(vs))
}

// required is get for a mandatory parameter.
func (q query) required(name string) (string, error) {
	if _, ok := q[name]; !ok {
		return "", problem.Malformed(name, "%s is required", name)
	}
	return q.get(name)
}

// point parses the lng and lat parameters.
func (q query) point() (lng, lat float64, err error) {
	s, err := q.required("lng")
	if err != nil {
		return 0, 0, err
	}
	if lng, err = ParseLng("lng", s); err != nil {
		return 0, 0, err
	}
	if s, err = q.required("lat"); err != nil {
		return 0, 0, err
	}
	if lat, err = ParseLat("lat", s); err != nil {
		return 0, 0, err
	}
	return lng, lat, nil
}

func (q query) layer(c *Catalog) (*Layer, error) {
	s, err := q.required("layer")
	if err != nil {
		return nil, err
	}
	return c.Resolve(s)
}

// containment resolves the optional layer of contains and check: nil
// (the fences) when the parameter is absent.
func (q query) containment(c *Catalog) (*Containment, error) {
	if _, given := q["layer"]; !given {
		return nil, nil
	}
	s, err := q.get("layer")
	if err != nil {
		return nil, err
	}
	return c.Containment(s)
}

func (q query) limit(l Limits) (int, error) {
	s, err := q.get("limit")
	if err != nil {
		return 0, err
	}
	if _, given := q["limit"]; given && s == "" {
		return 0, problem.Malformed("limit", "limit is empty")
	}
	return ParseLimit(s, l.DefaultLimit, l.MaxLimit)
}

func (h *Handler) parseWithin(r *http.Request) (WithinQuery, error) {
	qs, err := parseQuery(r, withinParams)
	if err != nil {
		return WithinQuery{}, err
	}
	q := WithinQuery{MaxVertices: h.limits.MaxResponseVertices}
	if q.Layer, err = qs.layer(h.catalog); err != nil {
		return q, err
	}
	if q.Lng, q.Lat, err = qs.point(); err != nil {
		return q, err
	}
	s, err := qs.required("radius")
	if err != nil {
		return q, err
	}
	if q.Radius, err = ParseRadius(s, h.limits.MaxRadius); err != nil {
		return q, err
	}
	if q.Limit, err = qs.limit(h.limits); err != nil {
		return q, err
	}
	return q, nil
}

func (h *Handler) parseBBox(r *http.Request) (BBoxQuery, error) {
	qs, err := parseQuery(r, bboxParams)
	if err != nil {
		return BBoxQuery{}, err
	}
	q := BBoxQuery{MaxVertices: h.limits.MaxResponseVertices}
	if q.Layer, err = qs.layer(h.catalog); err != nil {
		return q, err
	}
	s, err := qs.required("bbox")
	if err != nil {
		return q, err
	}
	if q.Box, err = ParseBBox(s, h.limits.MaxBBoxArea); err != nil {
		return q, err
	}
	if q.Limit, err = qs.limit(h.limits); err != nil {
		return q, err
	}
	return q, nil
}

func (h *Handler) parseContains(r *http.Request) (ContainsQuery, error) {
	qs, err := parseQuery(r, containsParams)
	if err != nil {
		return ContainsQuery{}, err
	}
	q := ContainsQuery{MaxVertices: h.limits.MaxResponseVertices}
	if q.Layer, err = qs.containment(h.catalog); err != nil {
		return q, err
	}
	if q.Lng, q.Lat, err = qs.point(); err != nil {
		return q, err
	}
	if q.Limit, err = qs.limit(h.limits); err != nil {
		return q, err
	}
	return q, nil
}

// queryLayer is a check's ?layer=, looked up once: whether it was given,
// and the layer or the error of its lookup.
type queryLayer struct {
	given bool
	c     *Containment
	err   error
}

// parseCheck reads a check's layer (the query's, looked up already, or
// the body's "layer", not both) and its body (see requestBody).
func (h *Handler) parseCheck(w http.ResponseWriter, r *http.Request, fromQuery queryLayer) (CheckQuery, error) {
	inQuery := fromQuery.given
	body, err := requestBody(w, r, h.limits.MaxBodyBytes)
	if err != nil {
		return CheckQuery{}, err
	}
	b, err := ParseCheck(body, h.limits.MaxBatch)
	if err != nil {
		return CheckQuery{}, err
	}
	q := CheckQuery{Points: b.Points}
	switch {
	case inQuery && b.HasLayer:
		return q, problem.Malformed("layer", "layer is given in the query and in the body")
	case b.HasLayer:
		q.Layer, err = h.catalog.Containment(b.Layer)
	default:
		q.Layer, err = fromQuery.c, fromQuery.err
	}
	return q, err
}
