package geofence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/geotoll/geotoll/problem"
)

// MaxPointIDLen bounds the length (bytes) of a batch point's id.
const MaxPointIDLen = 64

// Point is one position of a batch check. ID is the caller's own label (a
// vehicle id, say); it is echoed back and never reaches the database.
type Point struct {
	ID  string  `json:"id"`
	Lng float64 `json:"lng"`
	Lat float64 `json:"lat"`
}

// rawPoint keeps each member's raw JSON so that it can be checked with the
// API's own grammar and errors can name the point.
type rawPoint struct {
	ID, Lng, Lat json.RawMessage
}

// CheckBody is a batch check body: its points and, when HasLayer, the
// layer whose features to test them against (else the fences).
type CheckBody struct {
	Layer    string
	HasLayer bool
	Points   []Point
}

// ParseBatch is ParseCheck for a body's points alone; it refuses a body
// that names a layer.
func ParseBatch(r io.Reader, maxPoints int) ([]Point, error) {
	b, err := ParseCheck(r, maxPoints)
	var pe *problem.Error
	if (err == nil || errors.As(err, &pe) && pe.Code == problem.OutOfRange) && b.HasLayer {
		// Malformed before out of range, as in ParseCheck.
		return nil, problem.Malformed("layer", "this body may not name a layer")
	}
	if err != nil {
		return nil, err
	}
	return b.Points, nil
}

// ParseCheck reads a batch check body:
//
//	{"points":[{"id":"v1","lng":13.4,"lat":52.5}, …], "layer":"countries"}
//
// The body must be exactly one JSON object with the member "points" and
// optionally "layer" (a string: the geofence layer to test against), and
// no other. points is a list of 1..maxPoints objects with exactly the
// members id (a string of 1..MaxPointIDLen bytes of UTF-8 text: see
// isText), lng and lat (JSON
// numbers; longitudes in [-180, 180], latitudes in [-90, 90]). Member
// names are matched exactly (encoding/json would also take "LAT") and none
// may repeat (encoding/json would keep the last). Ids need not be unique:
// results come back in request order.
//
// The body is read as a token stream, so a batch over maxPoints is refused
// at its first extra point, without decoding the rest. Any other value out
// of range (no points, a coordinate) is answered once the whole body has
// parsed, so that a body both malformed and out of range is a 400
// whatever the order of its members.
//
// Errors are problems: 413 when r is an http.MaxBytesReader over its limit;
// 408 when reading r timed out (the server's read timeout);
// 400 for malformed JSON, unknown, repeated or missing members, or a value
// of the wrong type (naming it, e.g. "points[3].lat"); 422 for a point count
// or coordinate out of range.
func ParseCheck(r io.Reader, maxPoints int) (CheckBody, error) {
	dec := newBodyDecoder(r)
	var b CheckBody
	if err := expectDelim(dec, '{', "body", "the body must be a JSON object"); err != nil {
		return b, err
	}
	seen := false
	var late error // the first value out of range, answered once the body parsed
	for dec.More() {
		name, err := memberName(dec)
		if err != nil {
			return b, err
		}
		switch {
		case name == "layer" && b.HasLayer, name == "points" && seen:
			return b, problem.Malformed(name, "%s is given twice", name)
		case name == "layer":
			b.HasLayer = true
			if err := decodeString(dec, &b.Layer, "layer"); err != nil {
				return b, err
			}
		case name == "points":
			seen = true
			var out error
			if b.Points, out, err = parsePoints(dec, maxPoints); err != nil {
				return b, err
			}
			if late == nil {
				late = out
			}
		default:
			return b, problem.Malformed("body", "unknown member %q", truncate(name, 32))
		}
	}
	if err := expectDelim(dec, '}', "body", "malformed JSON"); err != nil {
		return b, err
	}
	if err := dec.end(); err != nil {
		return b, err
	}
	if !seen {
		return b, problem.Malformed("points", "points is required")
	}
	return b, late
}

// decodeString reads a JSON string member into dst: a string of UTF-8
// text (see isText).
func decodeString(dec bodyDecoder, dst *string, param string) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return dec.fail(err)
	}
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, dst) != nil {
		return problem.Malformed(param, "%s must be a string", param)
	}
	if !isText(raw) {
		return problem.Malformed(param, "%s is not UTF-8 text (invalid bytes, or half of a surrogate pair)", param)
	}
	return nil
}

// parsePoints reads the points array: its points, and the first value it
// holds out of range (out: a coordinate, or no point at all) or err, which
// ends the read (malformed, or more than maxPoints points).
func parsePoints(dec bodyDecoder, maxPoints int) (points []Point, out, err error) {
	if err := expectDelim(dec, '[', "points", "points must be an array of points"); err != nil {
		return nil, nil, err
	}
	for i := 0; dec.More(); i++ {
		if i == maxPoints {
			return nil, nil, problem.Range("points", "a batch holds 1..%d points, got more", maxPoints)
		}
		name := func(member string) string { return "points[" + strconv.Itoa(i) + "]" + member }
		if err := expectDelim(dec, '{', name(""), name("")+" must be an object"); err != nil {
			return nil, nil, err
		}
		var rp rawPoint
		for dec.More() {
			member, err := memberName(dec)
			if err != nil {
				return nil, nil, err
			}
			var dst *json.RawMessage
			switch member {
			case "id":
				dst = &rp.ID
			case "lng":
				dst = &rp.Lng
			case "lat":
				dst = &rp.Lat
			default:
				return nil, nil, problem.Malformed(name(""), "%s has an unknown member %q", name(""), truncate(member, 32))
			}
			if *dst != nil {
				return nil, nil, problem.Malformed(name("."+member), "%s is given twice", name("."+member))
			}
			if err := dec.Decode(dst); err != nil {
				return nil, nil, dec.fail(err)
			}
		}
		if err := expectDelim(dec, '}', name(""), "malformed JSON"); err != nil {
			return nil, nil, err
		}
		p, err := rp.parse(i)
		var pe *problem.Error
		switch {
		case err == nil:
			points = append(points, p)
		case errors.As(err, &pe) && pe.Code == problem.OutOfRange:
			if out == nil {
				out = err
			}
		default:
			return nil, nil, err
		}
	}
	if err := expectDelim(dec, ']', "points", "malformed JSON"); err != nil {
		return nil, nil, err
	}
	if out != nil {
		return nil, out, nil
	}
	if len(points) == 0 {
		return nil, problem.Range("points", "a batch holds 1..%d points, got 0", maxPoints), nil
	}
	return points, nil, nil
}

// expectDelim reads the next token, which must be the delimiter want.
func expectDelim(dec bodyDecoder, want json.Delim, param, detail string) error {
	tok, err := dec.Token()
	if err != nil {
		return dec.fail(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return problem.Malformed(param, "%s", detail)
	}
	return nil
}

// memberName reads an object member's name.
func memberName(dec bodyDecoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", dec.fail(err)
	}
	name, ok := tok.(string)
	if !ok {
		return "", problem.Malformed("body", "malformed JSON object")
	}
	return name, nil
}

func (rp rawPoint) parse(i int) (Point, error) {
	name := func(member string) string { return "points[" + strconv.Itoa(i) + "]." + member }
	var p Point
	switch {
	case rp.ID == nil:
		return p, problem.Malformed(name("id"), "%s is required", name("id"))
	case rp.Lng == nil:
		return p, problem.Malformed(name("lng"), "%s is required", name("lng"))
	case rp.Lat == nil:
		return p, problem.Malformed(name("lat"), "%s is required", name("lat"))
	}
	if len(rp.ID) == 0 || rp.ID[0] != '"' || json.Unmarshal(rp.ID, &p.ID) != nil {
		return p, problem.Malformed(name("id"), "%s must be a string", name("id"))
	}
	if !isText(rp.ID) {
		return p, problem.Malformed(name("id"), "%s is not UTF-8 text (invalid bytes, or half of a surrogate pair)", name("id"))
	}
	// A member out of range is answered once the others' types are
	// checked: a point both malformed and out of range is a 400.
	var out error
	keep := func(err error) error {
		var pe *problem.Error
		if errors.As(err, &pe) && pe.Code == problem.OutOfRange {
			if out == nil {
				out = err
			}
			return nil
		}
		return err
	}
	if p.ID == "" || len(p.ID) > MaxPointIDLen {
		out = problem.Range(name("id"), "%s must be 1..%d bytes of UTF-8", name("id"), MaxPointIDLen)
	}
	var err error
	if p.Lng, err = ParseLng(name("lng"), string(bytes.TrimSpace(rp.Lng))); keep(err) != nil {
		return p, err
	}
	if p.Lat, err = ParseLat(name("lat"), string(bytes.TrimSpace(rp.Lat))); keep(err) != nil {
		return p, err
	}
	return p, out
}

// bodyDecoder decodes a request body and keeps the bytes it has read, so
// that malformed JSON is reported where it goes wrong and a body cut short
// where it ends. (The body is bounded by the handler's MaxBytesReader.)
type bodyDecoder struct {
	*json.Decoder
	read *keepingReader
}

func newBodyDecoder(r io.Reader) bodyDecoder {
	kr := &keepingReader{r: r}
	return bodyDecoder{Decoder: json.NewDecoder(kr), read: kr}
}

// fail turns a decoding error into a problem: a body with nothing but
// white space is empty; one that ends before its JSON does is malformed at
// the byte where it ends; one with a syntax error is malformed at the byte
// where it goes wrong.
func (d bodyDecoder) fail(err error) error {
	if errors.Is(err, io.EOF) && d.InputOffset() == 0 {
		return problem.Malformed("body", "the body is empty; expected a JSON object")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return problem.Malformed("body", "malformed JSON at byte %d: the body ends before its JSON does", len(d.read.kept))
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		if at, msg, ok := syntaxErrorAt(d.read.kept); ok && msg == syntax.Error() {
			return problem.Malformed("body", "malformed JSON at byte %d: %s", at, syntax.Error())
		}
		return problem.Malformed("body", "malformed JSON: %s", syntax.Error())
	}
	return bodyError(err)
}

// end checks that nothing but white space follows the body's object. More
// after it — a second value, or the start of one cut short — is malformed
// where it begins (the object itself ended); an error reading it (413,
// 408) is what it is.
func (d bodyDecoder) end() error {
	_, err := d.Token()
	if errors.Is(err, io.EOF) {
		return nil
	}
	var syntax *json.SyntaxError
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &syntax) {
		return d.fail(err)
	}
	const detail = "the body must hold one JSON object and nothing after it"
	if at, msg, ok := syntaxErrorAt(d.read.kept); ok && !strings.Contains(msg, "max depth") {
		return problem.Malformed("body", "malformed JSON at byte %d: %s", at, detail)
	}
	return problem.Malformed("body", "%s", detail)
}

// syntaxErrorAt returns where the first syntax error of the bytes read so
// far is, counted as encoding/json counts a whole document (the offending
// byte is the at-th). A json.Decoder's own SyntaxError.Offset cannot say: it
// counts only the bytes of the values it decoded, not the names and
// delimiters read as tokens. The decoder reads the body in order and stops
// at its first error, which the bytes read so far therefore hold; a
// document complete before it (garbage after the object) is refused at the
// same byte. The scan counts nesting from the document's start, where the
// decoder counted it from the value it decoded: a body nested deep in a
// member the decoder read whole can stop the scan at its depth limit
// before the decoder's error, so a caller takes the byte only when msg is
// the error it found (or, past the object, not the depth limit's).
func syntaxErrorAt(read []byte) (at int64, msg string, ok bool) {
	var syntax *json.SyntaxError
	if err := json.Unmarshal(read, new(json.RawMessage)); errors.As(err, &syntax) {
		return syntax.Offset, syntax.Error(), true
	}
	return 0, "", false
}

// keepingReader keeps every byte read through it.
type keepingReader struct {
	r    io.Reader
	kept []byte
}

func (k *keepingReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.kept = append(k.kept, p[:n]...)
	return n, err
}

// bodyError turns a decoding error other than an early end into a problem.
func bodyError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &problem.Error{Code: problem.TooLarge, Param: "body",
			Detail: fmt.Sprintf("the body is larger than %d bytes", tooBig.Limit), Err: err}
	}
	// A body that could not be read (cut off at the server's read timeout,
	// or its connection gone) is not malformed, and the socket error's
	// text names the server's own address: it is logged, never shown.
	var netErr net.Error
	if errors.As(err, &netErr) {
		if netErr.Timeout() {
			return &problem.Error{Code: problem.RequestTimeout, Param: "body",
				Detail: "the body did not arrive in time; send it again, whole", Err: err}
		}
		return &problem.Error{Code: problem.Invalid, Param: "body", Detail: "the body could not be read", Err: err}
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return problem.Malformed(field, "%s must be a JSON %s, not %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	// DisallowUnknownFields reports `json: unknown field "x"`; other
	// decoder errors are as plain. None carries a secret.
	return problem.Malformed("body", "%s", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "struct", "map":
		return "object"
	case "slice", "array":
		return "array"
	case "string":
		return "string"
	}
	return "value"
}
