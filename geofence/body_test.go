package geofence

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/problem"
)

func TestParseBatch(t *testing.T) {
	long := strings.Repeat("x", MaxPointIDLen+1)
	tests := []struct {
		name  string
		body  string
		want  []Point
		code  problem.Code
		param string
	}{
		{name: "one point", body: `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`,
			want: []Point{{"v1", 13.4, 52.5}}},
		{name: "order kept, ids may repeat", body: `{"points":[{"id":"b","lng":1,"lat":2},{"id":"a","lng":-180,"lat":-90},{"id":"b","lng":180,"lat":90}]}`,
			want: []Point{{"b", 1, 2}, {"a", -180, -90}, {"b", 180, 90}}},
		{name: "whitespace and exponent", body: " {\n \"points\" : [ { \"lat\" : 1e-7 , \"lng\" : -0.5 , \"id\" : \"é\" } ] }\n",
			want: []Point{{"é", -0.5, 1e-7}}},
		{name: "empty body", body: ``, code: problem.Invalid, param: "body"},
		{name: "not json", body: `points=1`, code: problem.Invalid, param: "body"},
		{name: "truncated", body: `{"points":[{"id":"v1"`, code: problem.Invalid, param: "body"},
		{name: "array", body: `[]`, code: problem.Invalid, param: "body"},
		{name: "no points", body: `{}`, code: problem.Invalid, param: "points"},
		{name: "null points", body: `{"points":null}`, code: problem.Invalid, param: "points"},
		{name: "null body", body: `null`, code: problem.Invalid, param: "body"},
		{name: "zero points", body: `{"points":[]}`, code: problem.OutOfRange, param: "points"},
		{name: "too many points", body: `{"points":[` + strings.TrimSuffix(strings.Repeat(`{"id":"v","lng":0,"lat":0},`, 4), ",") + `]}`,
			code: problem.OutOfRange, param: "points"},
		{name: "unknown member", body: `{"points":[{"id":"v1","lng":0,"lat":0}],"when":"now"}`, code: problem.Invalid, param: "body"},
		{name: "unknown point member", body: `{"points":[{"id":"v1","lng":0,"lat":0,"alt":3}]}`, code: problem.Invalid, param: "points[0]"},
		{name: "member in another case", body: `{"points":[{"id":"v1","lng":0,"LAT":0}]}`, code: problem.Invalid, param: "points[0]"},
		{name: "points in another case", body: `{"Points":[{"id":"v1","lng":0,"lat":0}]}`, code: problem.Invalid, param: "body"},
		{name: "repeated member", body: `{"points":[{"id":"v1","lng":"x","lng":0,"lat":0}]}`, code: problem.Invalid, param: "points[0].lng"},
		{name: "repeated points", body: `{"points":[{"id":"v1","lng":0,"lat":0}],"points":[]}`, code: problem.Invalid, param: "points"},
		{name: "point not an object", body: `{"points":[[0,0]]}`, code: problem.Invalid, param: "points[0]"},
		{name: "points not an array", body: `{"points":{"id":"v1"}}`, code: problem.Invalid, param: "points"},
		{name: "trailing object", body: `{"points":[{"id":"v1","lng":0,"lat":0}]}{}`, code: problem.Invalid, param: "body"},
		{name: "trailing garbage", body: `{"points":[{"id":"v1","lng":0,"lat":0}]}x`, code: problem.Invalid, param: "body"},
		{name: "missing id", body: `{"points":[{"lng":0,"lat":0}]}`, code: problem.Invalid, param: "points[0].id"},
		{name: "missing lat", body: `{"points":[{"id":"v","lng":0,"lat":0},{"id":"v","lng":0}]}`, code: problem.Invalid, param: "points[1].lat"},
		{name: "numeric id", body: `{"points":[{"id":7,"lng":0,"lat":0}]}`, code: problem.Invalid, param: "points[0].id"},
		{name: "empty id", body: `{"points":[{"id":"","lng":0,"lat":0}]}`, code: problem.OutOfRange, param: "points[0].id"},
		{name: "long id", body: `{"points":[{"id":"` + long + `","lng":0,"lat":0}]}`, code: problem.OutOfRange, param: "points[0].id"},
		{name: "string lng", body: `{"points":[{"id":"v","lng":"13.4","lat":0}]}`, code: problem.Invalid, param: "points[0].lng"},
		{name: "null lat", body: `{"points":[{"id":"v","lng":1,"lat":null}]}`, code: problem.Invalid, param: "points[0].lat"},
		{name: "NaN", body: `{"points":[{"id":"v","lng":NaN,"lat":0}]}`, code: problem.Invalid, param: "body"},
		{name: "hex", body: `{"points":[{"id":"v","lng":0x10,"lat":0}]}`, code: problem.Invalid, param: "body"},
		{name: "lng out of range", body: `{"points":[{"id":"v","lng":0,"lat":0},{"id":"w","lng":180.5,"lat":0}]}`, code: problem.OutOfRange, param: "points[1].lng"},
		{name: "lat out of range", body: `{"points":[{"id":"v","lng":0,"lat":-91}]}`, code: problem.OutOfRange, param: "points[0].lat"},
		{name: "overflow", body: `{"points":[{"id":"v","lng":1e999,"lat":0}]}`, code: problem.OutOfRange, param: "points[0].lng"},
		// Malformed and out of range: a 400 whatever the order (the range
		// is answered once the body has parsed), the first range error named.
		{name: "zero points, then points", body: `{"points":[],"points":[{"id":"v1","lng":0,"lat":0}]}`, code: problem.Invalid, param: "points"},
		{name: "out of range, then unknown member", body: `{"points":[{"id":"v","lng":500,"lat":0}],"when":1}`, code: problem.Invalid, param: "body"},
		{name: "out of range, then numeric id", body: `{"points":[{"id":"v","lng":500,"lat":0},{"id":7,"lng":0,"lat":0}]}`, code: problem.Invalid, param: "points[1].id"},
		{name: "out of range, then trailing garbage", body: `{"points":[{"id":"","lng":0,"lat":0}]}x`, code: problem.Invalid, param: "body"},
		{name: "empty id, string lng", body: `{"points":[{"id":"","lng":"x","lat":0}]}`, code: problem.Invalid, param: "points[0].lng"},
		{name: "lng out of range, null lat", body: `{"points":[{"id":"v","lng":500,"lat":null}]}`, code: problem.Invalid, param: "points[0].lat"},
		{name: "out of range, and a layer", body: `{"points":[{"id":"v","lng":500,"lat":0}],"layer":"x"}`, code: problem.Invalid, param: "layer"},
		{name: "first range error named", body: `{"points":[{"id":"v","lng":0,"lat":0},{"id":"v","lng":500,"lat":0},{"id":"w","lng":0,"lat":95}]}`, code: problem.OutOfRange, param: "points[1].lng"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBatch(strings.NewReader(tt.body), 3)
			if tt.code != "" {
				wantProblem(t, err, tt.code, tt.param)
				return
			}
			if err != nil {
				t.Fatalf("ParseBatch: %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("ParseBatch = %v, want %v", got, tt.want)
			}
		})
	}
}

// A body that ends before its JSON does is malformed JSON at the byte where
// it ends; only a body with nothing in it (or only white space) is empty.
func TestBodyCutShort(t *testing.T) {
	const point = `{"id":"v1","lng":13.4,"lat":52.5}`
	for _, tc := range []struct {
		name, body, detail string
		parse              func(io.Reader) error
	}{
		{"batch, after a member name", `{"points":`, "malformed JSON at byte 10: the body ends before its JSON does", parseBatch},
		{"batch, in an array", `{"points":[` + point, "malformed JSON at byte 44: the body ends before its JSON does", parseBatch},
		{"batch, in a value", `{"points":[{"id":"v1","lng":13`, "malformed JSON at byte 30: the body ends before its JSON does", parseBatch},
		{"batch, one brace", `{`, "malformed JSON at byte 1: the body ends before its JSON does", parseBatch},
		{"batch, empty", ``, "the body is empty; expected a JSON object", parseBatch},
		{"batch, white space", " \n\t", "the body is empty; expected a JSON object", parseBatch},
		{"fence, after a member name", `{"type":`, "malformed JSON at byte 8: the body ends before its JSON does", parseFence},
		{"fence, in the geometry", `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],`,
			"malformed JSON at byte 69: the body ends before its JSON does", parseFence},
		{"fence, empty", ``, "the body is empty; expected a JSON object", parseFence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse(strings.NewReader(tc.body))
			wantProblem(t, err, problem.Invalid, "body")
			if got := problem.From(err).Detail; got != tc.detail {
				t.Errorf("detail %q, want %q", got, tc.detail)
			}
		})
	}
}

// Malformed JSON is reported at the byte where it goes wrong, counted from
// the start of the body as encoding/json counts a whole document ("after
// reading N bytes": the offending byte is the Nth), wherever in the body it
// is — after member names, delimiters and values the parsers read one token
// at a time, for a byte a token cannot start (after a member name) as for
// one inside a value.
func TestBodySyntaxErrorAtItsByte(t *testing.T) {
	const open = `{"type":"Feature","properties":{"name":"x"},"geometry":{"type":"Polygon","coordinates":`
	const fence = open + `[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	// encoding/json refuses the 10,001st level of nesting: open holds two.
	deep := open + strings.Repeat("[", 10010) + strings.Repeat("]", 10010) + `}}`
	for _, tc := range []struct {
		name, body string
		at         int // the offending byte, counted from 1
		parse      func(io.Reader) error
	}{
		{"batch, not a number", `{"points":[{"id":"v1","lng":NaN,"lat":52.5}]}`, 29, parseBatch},
		{"batch, a second point", `{"points":[{"id":"v1","lng":1,"lat":2},{"id":"v2","lng":1,"lat":2x}]}`, 66, parseBatch},
		{"batch, after the object", `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]} garbage`, 48, parseBatch},
		{"batch, no colon after a name", `{"points" 1}`, 11, parseBatch},
		{"batch, first byte", "\xef\xbb\xbf{}", 1, parseBatch},
		{"fence, after the object", fence + ` x`, len(fence) + 2, parseFence},
		{"fence, in the coordinates", strings.Replace(fence, "[0,1]", "[0,1}", 1), strings.Index(fence, "[0,1]") + 5, parseFence},
		{"fence, nested too deep", deep, len(open) + 9999, parseFence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse(strings.NewReader(tc.body))
			wantProblem(t, err, problem.Invalid, "body")
			want := fmt.Sprintf("malformed JSON at byte %d: ", tc.at)
			if got := problem.From(err).Detail; !strings.HasPrefix(got, want) {
				t.Errorf("detail %q, want it to begin %q", got, want)
			}
		})
	}
}

// A body nested deep, though not too deep for the decoder, which reads
// the coordinates as a value of their own, is too deep for the whole
// document encoding/json's scanner checks when locating an error later in
// it: the byte named must be the error's, or none be named.
func TestBodySyntaxErrorAfterDeepNestingNamesItsByte(t *testing.T) {
	const open = `{"type":"Feature","properties":{"name":"x"},"geometry":{"type":"Polygon","coordinates":`
	nested := open + strings.Repeat("[", 9999) + strings.Repeat("]", 9999)
	for _, body := range []string{nested + `}x}`, nested + `}} x`} {
		err := parseFence(strings.NewReader(body))
		wantProblem(t, err, problem.Invalid, "body")
		detail := problem.From(err).Detail
		if m := regexp.MustCompile(`at byte (\d+)`).FindStringSubmatch(detail); m != nil {
			at, _ := strconv.Atoi(m[1])
			if at < 1 || at > len(body) || body[at-1] != 'x' {
				t.Errorf("%q names byte %d, which is not the x at byte %d", detail, at, strings.LastIndex(body, "x")+1)
			}
		}
	}
}

// A body with more after its object — a second value, or the start of one
// that never ends — is refused for what follows the object, at the byte
// where that begins: the object itself did not end early.
func TestBodyWithMoreAfterItsObject(t *testing.T) {
	const batch = `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`
	const fence = `{"type":"Feature","properties":{"name":"x"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	for _, tc := range []struct {
		name, body string
		at         int
		parse      func(io.Reader) error
	}{
		{"batch, a second object", batch + ` {}`, len(batch) + 2, parseBatch},
		{"batch, a number cut short", batch + `0.`, len(batch) + 1, parseBatch},
		{"batch, a string never closed", batch + "\n\"abc", len(batch) + 2, parseBatch},
		{"fence, a second object", fence + `{}`, len(fence) + 1, parseFence},
		{"fence, a literal cut short", fence + ` tru`, len(fence) + 2, parseFence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse(strings.NewReader(tc.body))
			wantProblem(t, err, problem.Invalid, "body")
			want := fmt.Sprintf("malformed JSON at byte %d: the body must hold one JSON object and nothing after it", tc.at)
			if got := problem.From(err).Detail; got != want {
				t.Errorf("detail %q, want %q", got, want)
			}
		})
	}
}

func parseBatch(r io.Reader) error { _, err := ParseBatch(r, 10); return err }
func parseFence(r io.Reader) error { _, err := ParseFence(r, 100); return err }

func TestParseBatchBodyTooLarge(t *testing.T) {
	body := `{"points":[` + strings.TrimSuffix(strings.Repeat(`{"id":"v","lng":0,"lat":0},`, 100), ",") + `]}`
	w := httptest.NewRecorder()
	r := http.MaxBytesReader(w, io.NopCloser(strings.NewReader(body)), 256)
	_, err := ParseBatch(r, 1000)
	wantProblem(t, err, problem.TooLarge, "body")
	if problem.Status(problem.From(err).Code) != http.StatusRequestEntityTooLarge {
		t.Errorf("status = %d, want 413", problem.Status(problem.From(err).Code))
	}
}

func TestParseFence(t *testing.T) {
	square := `[[0,0],[1,0],[1,1],[0,1],[0,0]]`
	feature := func(geom, props string) string {
		return `{"type":"Feature","geometry":` + geom + `,"properties":` + props + `}`
	}
	tests := []struct {
		name  string
		body  string
		want  FenceInput
		code  problem.Code
		param string
	}{
		{name: "polygon", body: feature(`{"type":"Polygon","coordinates":[`+square+`]}`, `{"name":"Depot","kind":"yard"}`),
			want: FenceInput{Name: "Depot", Kind: "yard", Geometry: orb.MultiPolygon{{{{0, 0}, {1, 0}, {1, 1}, {0, 1}, {0, 0}}}}}},
		{name: "multipolygon, default kind, id and bbox ignored",
			body: `{"type":"Feature","id":7,"bbox":[0,0,1,1],"geometry":{"type":"MultiPolygon","coordinates":[[` + square + `]]},"properties":{"name":"A"}}`,
			want: FenceInput{Name: "A", Kind: DefaultFenceKind, Geometry: orb.MultiPolygon{{{{0, 0}, {1, 0}, {1, 1}, {0, 1}, {0, 0}}}}}},
		{name: "not a feature", body: `{"type":"Polygon","coordinates":[` + square + `]}`, code: problem.Invalid, param: "body"},
		{name: "wrong type", body: `{"type":"FeatureCollection","geometry":null,"properties":{"name":"x"}}`, code: problem.Invalid, param: "type"},
		{name: "no name", body: feature(`{"type":"Polygon","coordinates":[`+square+`]}`, `{}`), code: problem.Invalid, param: "properties.name"},
		{name: "blank name", body: feature(`{"type":"Polygon","coordinates":[`+square+`]}`, `{"name":"  "}`), code: problem.OutOfRange, param: "properties.name"},
		{name: "unknown property", body: feature(`{"type":"Polygon","coordinates":[`+square+`]}`, `{"name":"x","colour":"red"}`), code: problem.Invalid, param: "properties"},
		{name: "no geometry", body: `{"type":"Feature","properties":{"name":"x"}}`, code: problem.Invalid, param: "geometry"},
		{name: "point", body: feature(`{"type":"Point","coordinates":[0,0]}`, `{"name":"x"}`), code: problem.OutOfRange, param: "geometry"},
		{name: "open ring", body: feature(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`, `{"name":"x"}`), code: problem.OutOfRange, param: "geometry"},
		{name: "unclosed ring of four", body: feature(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0.5]]]}`, `{"name":"x"}`), code: problem.OutOfRange, param: "geometry"},
		{name: "altitude", body: feature(`{"type":"Polygon","coordinates":[[[0,0,5],[1,0,5],[1,1,5],[0,0,5]]]}`, `{"name":"x"}`), code: problem.OutOfRange, param: "geometry"},
		{name: "out of range", body: feature(`{"type":"Polygon","coordinates":[[[0,0],[181,0],[1,1],[0,0]]]}`, `{"name":"x"}`), code: problem.OutOfRange, param: "geometry"},
		{name: "strings", body: feature(`{"type":"Polygon","coordinates":[[["0","0"],[1,0],[1,1],[0,0]]]}`, `{"name":"x"}`), code: problem.Invalid, param: "geometry"},
		{name: "too many vertices", body: feature(`{"type":"MultiPolygon","coordinates":[[`+square+`],[`+square+`],[`+square+`]]}`, `{"name":"x"}`), code: problem.OutOfRange, param: "geometry"},
		{name: "empty", body: feature(`{"type":"MultiPolygon","coordinates":[]}`, `{"name":"x"}`), code: problem.OutOfRange, param: "geometry"},
		{name: "trailing data", body: feature(`{"type":"Polygon","coordinates":[`+square+`]}`, `{"name":"x"}`) + `{}`, code: problem.Invalid, param: "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFence(strings.NewReader(tt.body), 12)
			if tt.code != "" {
				wantProblem(t, err, tt.code, tt.param)
				return
			}
			if err != nil {
				t.Fatalf("ParseFence: %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("ParseFence = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParseCheckRefusesIDsThatAreNotUTF8: an id whose bytes are not UTF-8,
// or whose escapes name half a surrogate pair, is refused naming the point;
// encoding/json would answer it as U+FFFD. A real U+FFFD, sent as itself or
// escaped, and a surrogate pair are ids like any other.
func TestParseCheckRefusesIDsThatAreNotUTF8(t *testing.T) {
	ok := `{"id":"v","lng":0,"lat":0}`
	for name, id := range map[string]string{
		"invalid byte":       "\"v\xff\"",
		"truncated sequence": "\"v\xe2\x82\"",
		"overlong encoding":  "\"\xc0\xaf\"",
		"encoded surrogate":  "\"\xed\xa0\x80\"",
		"lone high escape":   `"v\ud800"`,
		"lone low escape":    `"\udc00v"`,
		"reversed pair":      `"\udc00\ud800"`,
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"points":[` + ok + `,{"id":` + id + `,"lng":0,"lat":0}]}`
			_, err := ParseCheck(strings.NewReader(body), 10)
			wantProblem(t, err, problem.Invalid, "points[1].id")
		})
	}
	for id, want := range map[string]string{
		`"\ufffd"`:         "\uFFFD",
		"\"\uFFFD\"":       "\uFFFD",
		`"\ud83d\ude9a"`:   "🚚",
		`"\\ud800"`:        `\ud800`,
		"\"truck \u00e9\"": "truck é",
	} {
		b, err := ParseCheck(strings.NewReader(`{"points":[{"id":`+id+`,"lng":0,"lat":0}]}`), 10)
		if err != nil || b.Points[0].ID != want {
			t.Errorf("id %s: %+v, %v; want %q", id, b.Points, err, want)
		}
	}
}

// TestParseFenceMembersAreExact: a fence's member names are matched
// exactly (encoding/json would take "TYPE" for "type" and "Name" for
// "name") and none may repeat (encoding/json would keep the last), at
// every level: the Feature, its geometry and its properties.
func TestParseFenceMembersAreExact(t *testing.T) {
	const (
		geom  = `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`
		props = `{"name":"depot"}`
	)
	for _, tc := range []struct{ name, body, param string }{
		{"Feature member in another case", `{"TYPE":"Feature","geometry":` + geom + `,"properties":` + props + `}`, "body"},
		{"geometry in another case", `{"type":"Feature","Geometry":` + geom + `,"properties":` + props + `}`, "body"},
		{"geometry member in another case", `{"type":"Feature","geometry":{"type":"Polygon","Coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]},"properties":` + props + `}`, "geometry"},
		{"property in another case", `{"type":"Feature","geometry":` + geom + `,"properties":{"Name":"depot"}}`, "properties"},
		{"repeated type", `{"type":"Feature","type":"Feature","geometry":` + geom + `,"properties":` + props + `}`, "type"},
		{"repeated geometry", `{"type":"Feature","geometry":` + geom + `,"geometry":` + geom + `,"properties":` + props + `}`, "geometry"},
		{"repeated properties", `{"type":"Feature","geometry":` + geom + `,"properties":` + props + `,"properties":` + props + `}`, "properties"},
		{"repeated coordinates", `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]],"coordinates":[[[0,0],[2,0],[2,2],[0,0]]]},"properties":` + props + `}`, "geometry.coordinates"},
		{"repeated geometry type", `{"type":"Feature","geometry":{"type":"Point","type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]},"properties":` + props + `}`, "geometry.type"},
		{"repeated name", `{"type":"Feature","geometry":` + geom + `,"properties":{"name":"a","name":"b"}}`, "properties.name"},
		{"repeated kind", `{"type":"Feature","geometry":` + geom + `,"properties":{"name":"a","kind":"x","kind":"y"}}`, "properties.kind"},
		// The members GeoJSON allows and the fence ignores are held to RFC 7946.
		{"id not UTF-8", "{\"type\":\"Feature\",\"id\":\"\xff\",\"geometry\":" + geom + `,"properties":` + props + `}`, "id"},
		{"id an object", `{"type":"Feature","id":{"a":1,"a":2},"geometry":` + geom + `,"properties":` + props + `}`, "id"},
		{"repeated id", `{"type":"Feature","id":1,"id":2,"geometry":` + geom + `,"properties":` + props + `}`, "id"},
		{"bbox a string", `{"type":"Feature","bbox":"junk","geometry":` + geom + `,"properties":` + props + `}`, "bbox"},
		{"geometry bbox an object", `{"type":"Feature","geometry":{"type":"Polygon","bbox":{"a":1},"coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]},"properties":` + props + `}`, "geometry.bbox"},
		{"bbox of three numbers", `{"type":"Feature","bbox":[0,0,1],"geometry":` + geom + `,"properties":` + props + `}`, "bbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFence(strings.NewReader(tc.body), 100)
			wantProblem(t, err, problem.Invalid, tc.param)
		})
	}
	// The exact members are still taken, in any order, with an id and
	// boxes as RFC 7946 has them.
	in, err := ParseFence(strings.NewReader(`{"properties":{"kind":"yard","name":"depot"},"id":"d-1","bbox":[0,0,1,1],"geometry":`+geom+`,"type":"Feature"}`), 100)
	if err != nil || in.Name != "depot" || in.Kind != "yard" || len(in.Geometry) != 1 {
		t.Errorf("members in another order: %+v, %v", in, err)
	}
	if _, err := ParseFence(strings.NewReader(`{"type":"Feature","id":7,"geometry":`+geom+`,"properties":`+props+`}`), 100); err != nil {
		t.Errorf("a numeric id: %v", err)
	}
}

// TestParseFenceNameIsText: a name or kind that is not UTF-8 text (invalid
// bytes, half of a surrogate pair) is refused, not stored as U+FFFD.
func TestParseFenceNameIsText(t *testing.T) {
	const geom = `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`
	for _, tc := range []struct{ props, param string }{
		{"{\"name\":\"dep\xffot\"}", "properties.name"},
		{`{"name":"depot\ud800"}`, "properties.name"},
		{"{\"name\":\"depot\",\"kind\":\"y\xe2\x82\"}", "properties.kind"},
	} {
		_, err := ParseFence(strings.NewReader(`{"type":"Feature","geometry":`+geom+`,"properties":`+tc.props+`}`), 100)
		wantProblem(t, err, problem.Invalid, tc.param)
	}
}

// A fence position beyond float64 (1e400) is a number JSON allows and far
// outside [-180, 180]: a 422 naming the geometry, as the same number is in
// a check body (TestParseBatch, "overflow") — not a 400 saying the
// coordinates are not an array of rings, which they are.
func TestParseFenceOverflowingCoordinateIsOutOfRange(t *testing.T) {
	for name, coords := range map[string]string{
		"polygon lng":      `"Polygon","coordinates":[[[0,0],[1e400,0],[1,1],[0,0]]]`,
		"polygon lat":      `"Polygon","coordinates":[[[0,0],[1,-1e999],[1,1],[0,0]]]`,
		"multipolygon lng": `"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[-1e400,0]]]]`,
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"type":"Feature","geometry":{"type":` + coords + `},"properties":{"name":"x"}}`
			_, err := ParseFence(strings.NewReader(body), 100)
			wantProblem(t, err, problem.OutOfRange, "geometry")
		})
	}
}

// Positions hold JSON numbers only. encoding/json decodes a null into a
// float64 as 0, so a position [null, 5] — a JavaScript client's NaN or
// Infinity, which JSON.stringify writes as null — would be stored at
// longitude 0; it is a 400 naming the position instead, as is any other
// value that is not a number (or an array where the nesting wants one).
func TestParseFenceNonNumberCoordinateIsMalformed(t *testing.T) {
	for _, tc := range []struct{ name, coords, where string }{
		{"null lng", `"Polygon","coordinates":[[[0,0],[null,0],[1,1],[0,0]]]`, "polygon 0 ring 0 position 1 holds null"},
		{"null lat", `"Polygon","coordinates":[[[0,0],[1,0],[1,null],[0,0]]]`, "polygon 0 ring 0 position 2 holds null"},
		{"null closing lng", `"Polygon","coordinates":[[[0,0],[1,0],[1,1],[null,0]]]`, "polygon 0 ring 0 position 3 holds null"},
		{"null in a hole", `"Polygon","coordinates":[[[0,0],[4,0],[4,4],[0,0]],[[1,1],[2,1],[2,null],[1,1]]]`, "polygon 0 ring 1 position 2 holds null"},
		{"null in a second polygon", `"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[[[5,5],[6,5],[null,6],[5,5]]]]`, "polygon 1 ring 0 position 2 holds null"},
		{"null position", `"Polygon","coordinates":[[[0,0],null,[1,1],[0,0]]]`, "polygon 0 ring 0 position 1 is null"},
		{"null ring", `"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]],null]`, "polygon 0 ring 1 is null"},
		{"null polygon", `"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],null]`, "polygon 1 is null"},
		{"null coordinates", `"Polygon","coordinates":null`, "geometry.coordinates is null"},
		{"string", `"Polygon","coordinates":[[[0,0],["1",0],[1,1],[0,0]]]`, "polygon 0 ring 0 position 1 holds a string"},
		{"boolean", `"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,true],[0,0]]]]`, "polygon 0 ring 0 position 2 holds true"},
		{"object", `"Polygon","coordinates":[[[0,0],[1,0],[1,{}],[0,0]]]`, "polygon 0 ring 0 position 2 holds an object"},
		{"one array too deep", `"Polygon","coordinates":[[[0,0],[1,0],[[1,1]],[0,0]]]`, "polygon 0 ring 0 position 2 holds an array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"type":"Feature","geometry":{"type":` + tc.coords + `},"properties":{"name":"x"}}`
			f, err := ParseFence(strings.NewReader(body), 100)
			if err == nil {
				t.Fatalf("accepted as %v", f.Geometry)
			}
			wantProblem(t, err, problem.Invalid, "geometry")
			if !strings.Contains(problem.From(err).Detail, tc.where) {
				t.Errorf("detail %q does not say %q", problem.From(err).Detail, tc.where)
			}
		})
	}
}

// A GeometryCollection is well formed GeoJSON of the wrong kind: a 422
// saying the geometry must be a Polygon or MultiPolygon, where its
// "geometries" member used to be refused as unknown (a 400). A Polygon
// with a "geometries" member is still malformed.
func TestParseFenceGeometryCollectionIsOutOfRange(t *testing.T) {
	const props = `,"properties":{"name":"depot"}}`
	for _, geom := range []string{
		`{"type":"GeometryCollection","geometries":[]}`,
		`{"geometries":[{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}],"type":"GeometryCollection"}`,
	} {
		_, err := ParseFence(strings.NewReader(`{"type":"Feature","geometry":`+geom+props), 100)
		wantProblem(t, err, problem.OutOfRange, "geometry")
		if err != nil && !strings.Contains(err.Error(), "Polygon or MultiPolygon") {
			t.Errorf("%s: %v, want it to say the geometry must be a Polygon or MultiPolygon", geom, err)
		}
	}
	_, err := ParseFence(strings.NewReader(`{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]],"geometries":[]}`+props), 100)
	wantProblem(t, err, problem.Invalid, "geometry")
}

// A fence's name or kind holding a control character (C0, DEL, C1) or a
// bidirectional embedding, override or isolate is a 422 naming the
// member: they forge lines in logs and terminals, or make a name display
// as another. Only NUL used to be refused. Other text passes.
func TestParseFenceNameWithoutControls(t *testing.T) {
	const geom = `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`
	body := func(props string) string {
		return `{"type":"Feature","geometry":` + geom + `,"properties":` + props + `}`
	}
	for _, c := range []string{`\u0000`, `\u0007`, `\t`, `\n`, `\r`, `\u001b`, `\u007f`, `\u0085`, `\u009b`,
		`\u202a`, `\u202b`, `\u202c`, `\u202d`, `\u202e`, `\u2066`, `\u2067`, `\u2068`, `\u2069`} {
		_, err := ParseFence(strings.NewReader(body(`{"name":"depot`+c+`1"}`)), 100)
		wantProblem(t, err, problem.OutOfRange, "properties.name")
		_, err = ParseFence(strings.NewReader(body(`{"name":"depot","kind":"`+c+`yard"}`)), 100)
		wantProblem(t, err, problem.OutOfRange, "properties.kind")
	}
	for _, name := range []string{"Dépôt Zürich", "東京 倉庫", "مستودع", "depot 🚚", "a\u200db", "x\u200fy"} {
		if in, err := ParseFence(strings.NewReader(body(`{"name":"`+name+`"}`)), 100); err != nil || in.Name != name {
			t.Errorf("name %q: %+v, %v", name, in.Name, err)
		}
	}
}
