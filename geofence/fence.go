package geofence

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/problem"
)

// Bounds of a fence's attributes.
const (
	MaxFenceNameLen  = 200
	MaxFenceKindLen  = 64
	DefaultFenceKind = "zone"
)

// FenceInput is a validated fence to create or replace: a name, a kind and
// a Polygon or MultiPolygon in lon/lat (SRID 4326). Ring orientation is
// whatever the client sent; the database normalises it (RFC 7946: exterior
// rings counter-clockwise, holes clockwise) and checks validity.
type FenceInput struct {
	Name     string
	Kind     string
	Geometry orb.MultiPolygon
}

// fenceDoc is the accepted shape of a fence: a GeoJSON Feature with the
// members type, geometry, properties (and id and bbox, ignored: the path
// names the fence, the box is recomputed). Its properties are name and
// kind, and the read-only created_at, updated_at and revision a fence is
// answered with, ignored: a fence read with GET can be written back with
// PUT as it was read.
type fenceDoc struct {
	Type       string
	Geometry   *geometryDoc
	Properties *fenceProperties
}

type geometryDoc struct {
	Type        string
	Coordinates json.RawMessage // bbox is ignored
	// Geometries reports a "geometries" member: a GeometryCollection's,
	// read only to say that the geometry must be a Polygon or
	// MultiPolygon (a 422), not that the member is unknown (a 400).
	Geometries bool
}

type fenceProperties struct {
	Name, Kind *string
}

// The members each object of a fence may have, matched exactly.
var (
	featureMembers    = []string{"type", "id", "bbox", "geometry", "properties"}
	geometryMembers   = []string{"type", "coordinates", "bbox", "geometries"}
	propertiesMembers = []string{"name", "kind", "created_at", "updated_at", "revision"}
)

// readOnlyProperties are the properties a fence is answered with that its
// writes do not set: the database keeps them (created_at, updated_at, and
// the revision of the ETag). A body may carry them, with any value, and
// they are ignored, so that a fence read with GET and edited can be PUT
// back as it is.
var readOnlyProperties = []string{"created_at", "updated_at", "revision"}

// ParseFence reads a fence as a GeoJSON Feature:
//
//	{"type":"Feature",
//	 "geometry":{"type":"Polygon","coordinates":[[[lng,lat], …]]},
//	 "properties":{"name":"Depot","kind":"zone"}}
//
// Member names are matched exactly (encoding/json would also take "TYPE"
// or "Name") and none may repeat (encoding/json would keep the last), in
// the Feature, its geometry and its properties. Unknown members are
// refused, as are properties other than name (required, 1..MaxFenceNameLen
// bytes of UTF-8 text), kind (optional, default "zone"; both without
// control characters or bidirectional embeddings, overrides or isolates:
// see checkText) and the read-only created_at, updated_at and revision
// (ignored, whatever their value: the database sets them). The geometry
// must be a Polygon or MultiPolygon of [lng, lat] positions (no altitude)
// within [-180, 180] × [-90, 90], every ring closed with at least four
// positions, no edge between antipodal positions (see antipodal), and at
// most maxVertices positions in all.
//
// Errors: 413 from an http.MaxBytesReader, 408 when reading r timed out,
// 400 malformed, 422 well formed but not an acceptable fence. Validity in
// the OGC sense (no self-intersection…) is checked by PostGIS when the
// fence is written.
func ParseFence(r io.Reader, maxVertices int) (FenceInput, error) {
	dec := newBodyDecoder(r)
	doc, err := readFeature(dec)
	if err != nil {
		return FenceInput{}, err
	}
	if err := dec.end(); err != nil {
		return FenceInput{}, err
	}
	if doc.Type != "Feature" {
		return FenceInput{}, problem.Malformed("type", `type must be "Feature"`)
	}
	if doc.Properties == nil || doc.Properties.Name == nil {
		return FenceInput{}, problem.Malformed("properties.name", "properties.name is required")
	}
	in := FenceInput{Name: *doc.Properties.Name, Kind: DefaultFenceKind}
	if k := doc.Properties.Kind; k != nil {
		in.Kind = *k
	}
	if err := checkText("properties.name", in.Name, MaxFenceNameLen); err != nil {
		return FenceInput{}, err
	}
	if err := checkText("properties.kind", in.Kind, MaxFenceKindLen); err != nil {
		return FenceInput{}, err
	}
	if doc.Geometry == nil {
		return FenceInput{}, problem.Malformed("geometry", "geometry is required")
	}
	g, err := parsePolygons(doc.Geometry, maxVertices)
	if err != nil {
		return FenceInput{}, err
	}
	in.Geometry = g
	return in, nil
}

// readFeature reads the body's one object, member by member.
func readFeature(dec bodyDecoder) (fenceDoc, error) {
	var doc fenceDoc
	if err := expectDelim(dec, '{', "body", "the body must be a JSON object"); err != nil {
		return doc, err
	}
	err := readMembers(dec, "", featureMembers, func(name, param string) error {
		switch name {
		case "type":
			return decodeString(dec, &doc.Type, param)
		case "geometry":
			return readObject(dec, param, func() error {
				doc.Geometry = &geometryDoc{}
				return readGeometry(dec, param, doc.Geometry)
			})
		case "properties":
			return readObject(dec, param, func() error {
				doc.Properties = &fenceProperties{}
				return readProperties(dec, param, doc.Properties)
			})
		}
		return decodeIgnored(dec, name, param) // id, bbox
	})
	return doc, err
}

// readGeometry reads the geometry's members, its '{' already read.
func readGeometry(dec bodyDecoder, path string, g *geometryDoc) error {
	return readMembers(dec, path, geometryMembers, func(name, param string) error {
		switch name {
		case "type":
			return decodeString(dec, &g.Type, param)
		case "coordinates":
			return decodeRaw(dec, &g.Coordinates)
		case "geometries":
			g.Geometries = true
			var raw json.RawMessage
			return decodeRaw(dec, &raw)
		}
		return decodeIgnored(dec, name, param) // bbox
	})
}

// readProperties reads the properties' members, its '{' already read: name
// and kind, and the read-only ones, whose values are read as JSON and
// ignored.
func readProperties(dec bodyDecoder, path string, p *fenceProperties) error {
	return readMembers(dec, path, propertiesMembers, func(name, param string) error {
		if slices.Contains(readOnlyProperties, name) {
			var raw json.RawMessage
			return decodeRaw(dec, &raw)
		}
		dst := &p.Name
		if name == "kind" {
			dst = &p.Kind
		}
		*dst = new(string)
		return decodeString(dec, *dst, param)
	})
}

// decodeIgnored reads a member GeoJSON allows and the fence ignores, as
// RFC 7946 has it: an id is a string (of UTF-8 text) or a number
// (section 3.2); a bbox an array of 2n numbers, n ≥ 2 (section 5). Any
// other value is malformed, as in the members the fence reads.
func decodeIgnored(dec bodyDecoder, name, param string) error {
	var raw json.RawMessage
	if err := decodeRaw(dec, &raw); err != nil {
		return err
	}
	if name == "id" {
		var n json.Number
		switch {
		case len(raw) > 0 && raw[0] == '"':
			if !isText(raw) {
				return problem.Malformed(param, "%s is not UTF-8 text (invalid bytes, or half of a surrogate pair)", param)
			}
		case json.Unmarshal(raw, &n) != nil:
			return problem.Malformed(param, "%s must be a string or a number", param)
		}
		return nil
	}
	var box []float64
	if err := json.Unmarshal(raw, &box); err != nil || len(box) < 4 || len(box)%2 != 0 {
		return problem.Malformed(param, "%s must be an array of 2n numbers, n at least 2", param)
	}
	return nil
}

// readObject reads a member's value that must be an object or null: read
// is called after its '{' (and reads up to its '}'); null leaves it absent.
func readObject(dec bodyDecoder, param string, read func() error) error {
	tok, err := dec.Token()
	if err != nil {
		return dec.fail(err)
	}
	switch tok {
	case nil:
		return nil
	case json.Delim('{'):
		return read()
	}
	return problem.Malformed(param, "%s must be a JSON object", param)
}

// readMembers reads an object's members up to its closing '}', its '{'
// already read. Each name must be one of names, exactly, and appear once;
// value reads its value (param is its path, "geometry.type").
func readMembers(dec bodyDecoder, path string, names []string, value func(name, param string) error) error {
	where := path
	if where == "" {
		where = "body"
	}
	var seen []string
	for dec.More() {
		name, err := memberName(dec)
		if err != nil {
			return err
		}
		if !slices.Contains(names, name) {
			return problem.Malformed(where, "%s has an unknown member %q", where, truncate(name, 32))
		}
		param := name
		if path != "" {
			param = path + "." + name
		}
		if slices.Contains(seen, name) {
			return problem.Malformed(param, "%s is given twice", param)
		}
		seen = append(seen, name)
		if err := value(name, param); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}', where, "malformed JSON")
}

// decodeRaw reads the next value as it is.
func decodeRaw(dec bodyDecoder, dst *json.RawMessage) error {
	if err := dec.Decode(dst); err != nil {
		return dec.fail(err)
	}
	return nil
}

// checkText checks a fence's name or kind: 1..maxLen bytes of UTF-8 text,
// not blank, without a control character (C0, DEL or C1: a NUL PostgreSQL
// cannot store, line breaks and escapes that forge lines in logs and
// terminals) or a bidirectional embedding, override or isolate (U+202A–
// U+202E, U+2066–U+2069: they reorder how the text, and whatever follows
// it on a line, is displayed, so a name could read as another). Each is a
// 422 naming the member.
func checkText(param, s string, maxLen int) error {
	if strings.TrimSpace(s) == "" || len(s) > maxLen || !utf8.ValidString(s) {
		return problem.Range(param, "%s must be 1..%d bytes of UTF-8 text, not blank", param, maxLen)
	}
	for i, c := range s {
		switch {
		case unicode.IsControl(c):
			return problem.Range(param, "%s holds the control character %U at byte %d; control characters are not allowed", param, c, i)
		case bidiControl(c):
			return problem.Range(param, "%s holds the bidirectional formatting character %U at byte %d; embeddings, overrides and isolates are not allowed", param, c, i)
		}
	}
	return nil
}

// bidiControl reports whether c is a bidirectional embedding, override or
// isolate, or the character that ends one: U+202A–U+202E, U+2066–U+2069.
func bidiControl(c rune) bool {
	return (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069)
}

// coordinatesError is the problem of coordinates that did not decode: a
// number beyond float64 (1e400), which JSON allows, is a position out of
// range (422, as in a check body); anything else is malformed (400).
func coordinatesError(err error, malformed string) error {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) && typ.Type != nil && typ.Type.Kind() == reflect.Float64 && strings.HasPrefix(typ.Value, "number") {
		return problem.Range("geometry", "a position holds %s, outside [-180, 180] × [-90, 90]", truncate(typ.Value, 40))
	}
	return problem.Malformed("geometry", "%s", malformed)
}

// nonNumber returns a 400 naming the first value of coordinates that is
// neither an array where the nesting wants one nor a JSON number where a
// position's longitude or latitude belongs: null, a string, a boolean, an
// object. depth is how many arrays hold a number: 3 in a Polygon, 4 in a
// MultiPolygon. It returns nil when there is none.
//
// encoding/json leaves a float64 as it is for a null, so [null, 5] would
// decode as [0, 5] and store a fence at longitude 0 — and a JavaScript
// client's NaN or Infinity is serialised as null. Walking the tokens is
// slow, so it is done only when decoding failed (decodeErr; the walk names
// the position, where the decoding error does not) or the text holds a
// null: strings, booleans and objects already fail the decoding, so
// coordinates that decoded without a null are well formed.
func nonNumber(coords json.RawMessage, depth int, decodeErr error) error {
	if decodeErr == nil && !bytes.Contains(coords, []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(coords))
	dec.UseNumber()
	idx := make([]int, 0, depth) // the index of the current value in each open array
	for {
		tok, err := dec.Token()
		if err != nil { // the end: coordinates was read as valid JSON, so nothing else
			return nil
		}
		level := len(idx) // arrays around tok
		switch _, number := tok.(json.Number); {
		case tok == json.Delim(']'):
			idx = idx[:level-1]
			if level > 1 {
				idx[level-2]++
			}
			continue
		case tok == json.Delim('[') && level < depth:
			idx = append(idx, 0)
			continue
		case number && level == depth:
			idx[level-1]++
			continue
		}
		return problem.Malformed("geometry", "%s", misplaced(idx, depth, tok))
	}
}

// misplaced says what is wrong with tok, found inside the open arrays of
// coordinates at indexes idx (see nonNumber): where it is, in the words
// of parsePolygons' errors ("polygon 0 ring 1 position 3"), what it is,
// and what belongs there.
func misplaced(idx []int, depth int, tok json.Token) string {
	what := "a number"
	switch tok := tok.(type) {
	case nil:
		what = "null"
	case string:
		what = "a string"
	case bool:
		what = strconv.FormatBool(tok)
	case json.Delim:
		what = "an array"
		if tok == '{' {
			what = "an object"
		}
	}
	if len(idx) == 0 {
		return "geometry.coordinates is " + what + ", not an array"
	}
	path := idx
	if depth == 3 { // a Polygon: its rings are those of polygon 0
		path = append([]int{0}, idx...)
	}
	var where strings.Builder
	for i, name := range []string{"polygon", "ring", "position"} {
		if i < len(path) {
			if i > 0 {
				where.WriteByte(' ')
			}
			where.WriteString(name + " " + strconv.Itoa(path[i]))
		}
	}
	switch len(path) {
	case 1:
		return where.String() + " is " + what + ", not an array of rings"
	case 2:
		return where.String() + " is " + what + ", not an array of positions"
	case 3:
		return where.String() + " is " + what + ", not [lng, lat]"
	}
	return where.String() + " holds " + what + ": a position is [lng, lat], two JSON numbers"
}

// parsePolygons decodes a Polygon or MultiPolygon into a MultiPolygon.
func parsePolygons(g *geometryDoc, maxVertices int) (orb.MultiPolygon, error) {
	const param = "geometry"
	if g.Type != "Polygon" && g.Type != "MultiPolygon" {
		return nil, problem.Range(param, "geometry must be a Polygon or MultiPolygon, not %q", truncate(g.Type, 32))
	}
	if g.Geometries { // only a GeometryCollection has it
		return nil, problem.Malformed(param, "geometry has an unknown member %q", "geometries")
	}
	if g.Coordinates == nil {
		return nil, problem.Malformed(param, "geometry.coordinates is required")
	}
	var mp [][][][]float64
	switch g.Type {
	case "Polygon":
		var p [][][]float64
		err := json.Unmarshal(g.Coordinates, &p)
		if err := nonNumber(g.Coordinates, 3, err); err != nil {
			return nil, err
		}
		if err != nil {
			return nil, coordinatesError(err, "geometry.coordinates must be an array of rings of [lng, lat] positions")
		}
		mp = [][][][]float64{p}
	case "MultiPolygon":
		err := json.Unmarshal(g.Coordinates, &mp)
		if err := nonNumber(g.Coordinates, 4, err); err != nil {
			return nil, err
		}
		if err != nil {
			return nil, coordinatesError(err, "geometry.coordinates must be an array of polygons of rings of [lng, lat] positions")
		}
	}
	if len(mp) == 0 {
		return nil, problem.Range(param, "the geometry has no polygon")
	}
	vertices := 0
	out := make(orb.MultiPolygon, 0, len(mp))
	for pi, poly := range mp {
		if len(poly) == 0 {
			return nil, problem.Range(param, "polygon %d has no ring", pi)
		}
		p := make(orb.Polygon, 0, len(poly))
		for ri, ring := range poly {
			where := "polygon " + strconv.Itoa(pi) + " ring " + strconv.Itoa(ri)
			vertices += len(ring)
			if vertices > maxVertices {
				return nil, problem.Range(param, "the geometry has more than %d positions", maxVertices)
			}
			if len(ring) < 4 {
				return nil, problem.Range(param, "%s has %d positions; a ring needs at least 4", where, len(ring))
			}
			r := make(orb.Ring, len(ring))
			for i, pos := range ring {
				if len(pos) != 2 {
					return nil, problem.Range(param, "%s position %d must be [lng, lat], not %d numbers", where, i, len(pos))
				}
				lng, lat := pos[0], pos[1]
				if math.IsNaN(lng) || lng < -180 || lng > 180 || math.IsNaN(lat) || lat < -90 || lat > 90 {
					return nil, problem.Range(param, "%s position %d [%g, %g] is outside [-180, 180] × [-90, 90]", where, i, lng, lat)
				}
				r[i] = orb.Point{unsigned(lng), unsigned(lat)}
			}
			if r[0] != r[len(r)-1] {
				return nil, problem.Range(param, "%s is not closed: its last position must repeat its first", where)
			}
			p = append(p, r)
		}
		out = append(out, p)
	}
	if err := checkEdges(out); err != nil {
		return nil, err
	}
	return out, nil
}

// unsigned is x with -0 as +0: one number in JSON, but PostGIS finds a
// ring closed only when its ends are equal bit for bit ("Polygon must
// have closed rings").
func unsigned(x float64) float64 {
	if x == 0 {
		return 0
	}
	return x
}

// antipodalTolerance is how near two positions' unit vectors must come to
// opposite for their edge to count as antipodal, in each coordinate.
// PostGIS refuses an edge within about 5e-14 (measured on PostGIS 3.3:
// 3e-12° of latitude off antipodal passes, 2e-12° does not); 1e-12 —
// about 6 µm on the ground — leaves a margin wide enough that the last
// bits of two libraries' sine and cosine never decide, so no edge PostGIS
// refuses passes here.
const antipodalTolerance = 1e-12

// antipodal reports whether a and b (lon/lat degrees) are antipodal on the
// sphere, as PostGIS's geography finds them (edge_calculate_gbox: the two
// positions' unit vectors opposite within a tolerance): the great circle
// of their edge is not defined, and PostGIS raises "Antipodal (180 degrees
// long) edge detected!" when it makes a geography of it, as the fence
// table's geography index does. [-90, 0]–[90, 0] and [0, -90]–[5, 90] are
// antipodal; [-100, 0]–[100, 0] (the short way, 160°) and [-180, 0]–[180,
// 0] (one point) are not.
func antipodal(a, b orb.Point) bool {
	u, v := unitVector(a), unitVector(b)
	for i := range u {
		if math.Abs(u[i]+v[i]) > antipodalTolerance {
			return false
		}
	}
	return true
}

// unitVector is the position on the unit sphere of p (lon/lat degrees),
// computed as PostGIS's ll2cart does.
func unitVector(p orb.Point) [3]float64 {
	lng, lat := math.Pi*p[0]/180, math.Pi*p[1]/180
	c := math.Cos(lat)
	return [3]float64{c * math.Cos(lng), c * math.Sin(lng), math.Sin(lat)}
}

// checkEdges refuses a geometry with an edge between antipodal positions
// (see antipodal): a 422 naming the edge, with reason and location as
// PostGIS's own validity problems have them, instead of the server error
// the database would raise on storing it.
func checkEdges(g orb.MultiPolygon) error {
	for pi, poly := range g {
		for ri, ring := range poly {
			for i := 1; i < len(ring); i++ {
				a, b := ring[i-1], ring[i]
				if !antipodal(a, b) {
					continue
				}
				e := problem.Range("geometry", "polygon %d ring %d edge %d from [%g, %g] to [%g, %g] joins antipodal points: "+
					"no great circle runs between them, so it has no shape on the globe; add a position between them", pi, ri, i-1, a[0], a[1], b[0], b[1])
				e.Extra = map[string]any{"reason": "Antipodal edge", "location": []float64{a[0], a[1]}}
				return e
			}
		}
	}
	return nil
}
