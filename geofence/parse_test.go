package geofence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/problem"
)

// wantProblem checks that err is a problem with the given code and param.
func wantProblem(t *testing.T, err error, code problem.Code, param string) {
	t.Helper()
	var p *problem.Error
	if !errors.As(err, &p) {
		t.Fatalf("error %v (%T) is not a *problem.Error", err, err)
	}
	if p.Code != code {
		t.Errorf("code = %q, want %q (%v)", p.Code, code, err)
	}
	if param != "" && p.Param != param {
		t.Errorf("param = %q, want %q (%v)", p.Param, param, err)
	}
}

func TestIsNumber(t *testing.T) {
	good := []string{"0", "-0", "1", "-1", "12.5", "-12.5", "0.5", "1e3", "1E3", "1e+3", "1e-7", "-1.25e-7", "180", "123456789012345678"}
	bad := []string{"", "-", "+1", " 1", "1 ", "1\n", "01", "-01", ".5", "5.", "1.e3", "1e", "1e+", "NaN", "nan", "Inf", "-Inf", "+Inf",
		"infinity", "0x1p3", "0X1P3", "0x10", "1_000", "1,5", "1.2.3", "--1", "1e3.5", "½", "٣", "1\x00", "0b1", "0o7", "1d", "1f"}
	for _, s := range good {
		if !isNumber(s) {
			t.Errorf("isNumber(%q) = false, want true", s)
		}
	}
	for _, s := range bad {
		if isNumber(s) {
			t.Errorf("isNumber(%q) = true, want false", s)
		}
	}
}

func TestParseLngLat(t *testing.T) {
	tests := []struct {
		name   string
		lat    bool
		in     string
		want   float64
		code   problem.Code // "" = success
		detail string       // substring of the detail
	}{
		{name: "zero", in: "0", want: 0},
		{name: "negative", in: "-73.9857", want: -73.9857},
		{name: "west edge", in: "-180", want: -180},
		{name: "east edge", in: "180", want: 180},
		{name: "exponent", in: "1e-7", want: 1e-7},
		{name: "underflow is zero", in: "1e-400", want: 0},
		{name: "north pole", lat: true, in: "90", want: 90},
		{name: "south pole", lat: true, in: "-90", want: -90},
		{name: "lng beyond east", in: "180.0000001", code: problem.OutOfRange},
		{name: "lng beyond west", in: "-181", code: problem.OutOfRange},
		{name: "lat beyond north", lat: true, in: "90.5", code: problem.OutOfRange},
		{name: "lat 180", lat: true, in: "180", code: problem.OutOfRange},
		{name: "overflow", in: "1e999", code: problem.OutOfRange},
		{name: "negative overflow", lat: true, in: "-1e999", code: problem.OutOfRange},
		{name: "empty", in: "", code: problem.Invalid, detail: "empty"},
		{name: "NaN", in: "NaN", code: problem.Invalid},
		{name: "Inf", in: "Inf", code: problem.Invalid},
		{name: "-Inf", lat: true, in: "-Inf", code: problem.Invalid},
		{name: "infinity", in: "infinity", code: problem.Invalid},
		{name: "hex float", in: "0x1p3", code: problem.Invalid},
		{name: "leading plus", in: "+13.4", code: problem.Invalid},
		{name: "leading space", in: " 13.4", code: problem.Invalid},
		{name: "trailing space", in: "13.4 ", code: problem.Invalid},
		{name: "underscore", in: "1_3.4", code: problem.Invalid},
		{name: "comma decimal", in: "13,4", code: problem.Invalid},
		{name: "word", in: "east", code: problem.Invalid},
		{name: "leading zero", in: "013.4", code: problem.Invalid},
		{name: "too long", in: "1." + strings.Repeat("0", 40), code: problem.Invalid, detail: "longer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			param, parse := "lng", ParseLng
			if tt.lat {
				param, parse = "lat", ParseLat
			}
			got, err := parse(param, tt.in)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("parse(%q): %v", tt.in, err)
				}
				if got != tt.want {
					t.Errorf("parse(%q) = %v, want %v", tt.in, got, tt.want)
				}
				return
			}
			wantProblem(t, err, tt.code, param)
			if tt.detail != "" && !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("error %q does not mention %q", err, tt.detail)
			}
		})
	}
}

func TestParseRadius(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want float64
		code problem.Code
	}{
		{name: "ten metres", in: "10", want: 10},
		{name: "fraction", in: "0.5", want: 0.5},
		{name: "zero", in: "0", want: 0},
		{name: "max", in: "50000", want: 50000},
		{name: "exponent", in: "5e4", want: 50000},
		{name: "beyond max", in: "50000.001", code: problem.OutOfRange},
		{name: "negative", in: "-1", code: problem.OutOfRange},
		{name: "negative zero is zero", in: "-0", want: 0},
		{name: "huge", in: "1e308", code: problem.OutOfRange},
		{name: "empty", in: "", code: problem.Invalid},
		{name: "unit", in: "10m", code: problem.Invalid},
		{name: "NaN", in: "NaN", code: problem.Invalid},
		{name: "hex", in: "0x10", code: problem.Invalid},
		{name: "plus", in: "+10", code: problem.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRadius(tt.in, 50000)
			if tt.code == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseRadius(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
				}
				return
			}
			wantProblem(t, err, tt.code, "radius")
		})
	}
}

func TestParseLimit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
		code problem.Code
	}{
		{name: "absent is default", in: "", want: 100},
		{name: "one", in: "1", want: 1},
		{name: "max", in: "1000", want: 1000},
		{name: "zero", in: "0", code: problem.OutOfRange},
		{name: "beyond max", in: "1001", code: problem.OutOfRange},
		{name: "huge", in: "9999999999", code: problem.OutOfRange},
		{name: "too many digits", in: "99999999999", code: problem.OutOfRange},
		{name: "negative", in: "-1", code: problem.Invalid},
		{name: "plus", in: "+5", code: problem.Invalid},
		{name: "leading zero", in: "05", code: problem.Invalid},
		{name: "fraction", in: "5.0", code: problem.Invalid},
		{name: "exponent", in: "1e3", code: problem.Invalid},
		{name: "space", in: " 5", code: problem.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLimit(tt.in, 100, 1000)
			if tt.code == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseLimit(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
				}
				return
			}
			wantProblem(t, err, tt.code, "limit")
		})
	}
}

func TestParseBBox(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    BBox
		crosses bool
		area    float64
		code    problem.Code
	}{
		{name: "berlin", in: "13,52,14,53", want: BBox{13, 52, 14, 53}, area: 1},
		{name: "negative", in: "-74.1,40.6,-73.9,40.8", want: BBox{-74.1, 40.6, -73.9, 40.8}, area: 0.2 * 0.2},
		{name: "a line is a box", in: "10,10,10,11", want: BBox{10, 10, 10, 11}, area: 0},
		{name: "antimeridian", in: "175,-20,-175,-10", want: BBox{175, -20, -175, -10}, crosses: true, area: 100},
		{name: "full antimeridian edge", in: "180,0,-180,1", want: BBox{180, 0, -180, 1}, crosses: true, area: 0},
		{name: "max area", in: "0,0,10,10", want: BBox{0, 0, 10, 10}, area: 100},
		{name: "area beyond max", in: "0,0,10,10.1", code: problem.OutOfRange},
		{name: "antimeridian area beyond max", in: "170,0,-170,10", code: problem.OutOfRange},
		{name: "south above north", in: "0,10,1,9", code: problem.OutOfRange},
		{name: "lng out of range", in: "-181,0,0,1", code: problem.OutOfRange},
		{name: "lat out of range", in: "0,-91,1,0", code: problem.OutOfRange},
		{name: "empty", in: "", code: problem.Invalid},
		{name: "three numbers", in: "1,2,3", code: problem.Invalid},
		{name: "five numbers", in: "1,2,3,4,5", code: problem.Invalid},
		{name: "empty part", in: "1,,3,4", code: problem.Invalid},
		{name: "trailing comma", in: "1,2,3,4,", code: problem.Invalid},
		{name: "spaces", in: "1, 2,3,4", code: problem.Invalid},
		{name: "NaN", in: "NaN,0,1,1", code: problem.Invalid},
		{name: "Inf", in: "0,0,Inf,1", code: problem.Invalid},
		{name: "hex", in: "0x1p3,0,9,1", code: problem.Invalid},
		{name: "plus", in: "+1,0,2,1", code: problem.Invalid},
		{name: "overflow", in: "1e999,0,1,1", code: problem.OutOfRange},
		{name: "too long", in: strings.Repeat("1", 200), code: problem.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBBox(tt.in, 100)
			if tt.code != "" {
				wantProblem(t, err, tt.code, "bbox")
				return
			}
			if err != nil {
				t.Fatalf("ParseBBox(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseBBox(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if got.CrossesAntimeridian() != tt.crosses {
				t.Errorf("CrossesAntimeridian = %v, want %v", got.CrossesAntimeridian(), tt.crosses)
			}
			if math.Abs(got.Area()-tt.area) > 1e-9 {
				t.Errorf("Area = %v, want %v", got.Area(), tt.area)
			}
			checkParts(t, got)
		})
	}
}

// checkParts checks that a box's parts lie within [-180, 180], are one or
// two as the box crosses, and add up to its area.
func checkParts(t *testing.T, b BBox) {
	t.Helper()
	parts := b.Parts()
	if want := map[bool]int{false: 1, true: 2}[b.CrossesAntimeridian()]; len(parts) != want {
		t.Fatalf("%+v: %d parts, want %d", b, len(parts), want)
	}
	var sum float64
	for _, p := range parts {
		if p.Min[0] < -180 || p.Max[0] > 180 || p.Min[0] > p.Max[0] || p.Min[1] > p.Max[1] {
			t.Errorf("%+v: part %v is not a box within [-180, 180]", b, p)
		}
		sum += (p.Max[0] - p.Min[0]) * (p.Max[1] - p.Min[1])
	}
	if math.Abs(sum-b.Area()) > 1e-6*max(1, b.Area()) {
		t.Errorf("%+v: parts cover %v square degrees, Area says %v", b, sum, b.Area())
	}
	u := b.Unwrapped()
	if a := (u.Max[0] - u.Min[0]) * (u.Max[1] - u.Min[1]); math.Abs(a-b.Area()) > 1e-9*max(1, a) {
		t.Errorf("%+v: unwrapped area %v != Area %v", b, a, b.Area())
	}
}

func TestParseFenceID(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		code problem.Code
	}{
		{in: "1", want: 1},
		{in: "9223372036854775807", want: math.MaxInt64},
		{in: "9223372036854775808", code: problem.NotFound},
		{in: "0", code: problem.NotFound},
		{in: "01", code: problem.Invalid},
		{in: "", code: problem.Invalid},
		{in: "-1", code: problem.Invalid},
		{in: "99999999999999999999", code: problem.NotFound},
	} {
		got, err := ParseFenceID(tt.in)
		if tt.code == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseFenceID(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		wantProblem(t, err, tt.code, "id")
	}
}

// jsonNumber is the fuzz oracle for isNumber: encoding/json's own idea of
// a bare number token.
func jsonNumber(s string) bool {
	if s == "" || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return false
	}
	if strings.TrimSpace(s) != s || !json.Valid([]byte(s)) {
		return false
	}
	return true
}

// checkNumberResult checks what every number parser promises: an error is a
// 400 or 422 problem naming param; a success is finite, in [lo, hi], and
// came from a string in JSON's number grammar that encoding/json reads as
// the same value.
func checkNumberResult(t *testing.T, param, s string, v float64, err error, lo, hi float64) {
	t.Helper()
	if err != nil {
		var p *problem.Error
		if !errors.As(err, &p) || (p.Code != problem.Invalid && p.Code != problem.OutOfRange) || p.Param != param {
			t.Fatalf("%q: error %v is not a 400/422 problem naming %s", s, err, param)
		}
		if p.Code == problem.OutOfRange && !jsonNumber(s) {
			t.Fatalf("%q: 422 for text that is not a number", s)
		}
		return
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
		t.Fatalf("%q: accepted %v outside [%v, %v]", s, v, lo, hi)
	}
	if !jsonNumber(s) {
		t.Fatalf("%q: accepted, but it is not a JSON number", s)
	}
	var want float64
	if err := json.Unmarshal([]byte(s), &want); err != nil || want != v {
		t.Fatalf("%q: parsed %v, encoding/json says %v (%v)", s, v, want, err)
	}
}

func FuzzParseLngLat(f *testing.F) {
	for _, s := range []string{"0", "-0", "13.4", "-180", "180", "90", "-90.0", "1e-7", "1E+2", "180.0000001",
		"NaN", "Inf", "-Inf", "+1", " 1", "0x1p3", "1_0", "01", ".5", "5.", "1e999", "1e-400", "", "٣", "1\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseLng("lng", s)
		checkNumberResult(t, "lng", s, v, err, -180, 180)
		v, err = ParseLat("lat", s)
		checkNumberResult(t, "lat", s, v, err, -90, 90)
		if isNumber(s) != jsonNumber(s) {
			t.Fatalf("%q: isNumber = %v, encoding/json disagrees", s, isNumber(s))
		}
	})
}

func FuzzParseRadius(f *testing.F) {
	for _, s := range []string{"10", "0", "50000", "50000.0001", "5e4", "-1", "-0", "NaN", "+10", "0x10", "10m", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRadius(s, 50000)
		checkNumberResult(t, "radius", s, v, err, 0, 50000)
	})
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"", "1", "1000", "1001", "0", "-1", "+1", "01", "1e3", "9999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseLimit(s, 100, 1000)
		if err != nil {
			var p *problem.Error
			if !errors.As(err, &p) || (p.Code != problem.Invalid && p.Code != problem.OutOfRange) || p.Param != "limit" {
				t.Fatalf("%q: error %v is not a 400/422 problem naming limit", s, err)
			}
			return
		}
		if v < 1 || v > 1000 {
			t.Fatalf("%q: accepted %d", s, v)
		}
	})
}

func FuzzParseBBox(f *testing.F) {
	for _, s := range []string{"13,52,14,53", "175,-20,-175,-10", "180,0,-180,1", "-180,-90,180,90", "0,0,10,10",
		"0,10,1,9", "1,2,3", "1,2,3,4,5", "NaN,0,1,1", "0x1p3,0,9,1", "+1,0,2,1", "1e999,0,1,1", "1, 2,3,4", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBBox(s, 100)
		if err != nil {
			var p *problem.Error
			if !errors.As(err, &p) || (p.Code != problem.Invalid && p.Code != problem.OutOfRange) || p.Param != "bbox" {
				t.Fatalf("%q: error %v is not a 400/422 problem naming bbox", s, err)
			}
			return
		}
		for _, v := range []float64{b.West, b.East} {
			if !(v >= -180 && v <= 180) {
				t.Fatalf("%q: longitude %v accepted", s, v)
			}
		}
		for _, v := range []float64{b.South, b.North} {
			if !(v >= -90 && v <= 90) {
				t.Fatalf("%q: latitude %v accepted", s, v)
			}
		}
		if b.South > b.North || !(b.Area() >= 0 && b.Area() <= 100) {
			t.Fatalf("%q: accepted %+v with area %v", s, b, b.Area())
		}
		checkParts(t, b)
	})
}

func FuzzParseBatch(f *testing.F) {
	for _, s := range []string{
		`{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`,
		`{"points":[{"id":"v1","lng":13.4,"lat":52.5},{"id":"v1","lng":-180,"lat":90}]}`,
		`{"points":[]}`,
		`{"points":null}`,
		`{}`,
		`[]`,
		`null`,
		``,
		`{"points":[{"id":"v1","lng":"13.4","lat":52.5}]}`,
		`{"points":[{"id":1,"lng":13.4,"lat":52.5}]}`,
		`{"points":[{"id":"v1","lng":13.4}]}`,
		`{"points":[{"id":"v1","lng":181,"lat":0}]}`,
		`{"points":[{"id":"v1","lng":1e999,"lat":0}]}`,
		`{"points":[{"id":"v1","lng":0,"lat":0,"x":1}]}`,
		`{"points":[{"id":"","lng":0,"lat":0}]}`,
		`{"points":[{"id":"v1","lng":0,"lat":0}]} {}`,
		`{"points":[{"id":"v1","lng":0,"lat":0}],"extra":true}`,
		`{"points":[{"id":"v1","lng":-0.0,"lat":1E-7}]}`,
		`{"points":[{"id":"00","lng":"","lng":0,"lAt":0}]}`, // repeated and mis-cased members
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const maxPoints = 5
		pts, err := ParseBatch(bytes.NewReader(body), maxPoints)
		if err != nil {
			var p *problem.Error
			if !errors.As(err, &p) || (p.Code != problem.Invalid && p.Code != problem.OutOfRange) || p.Param == "" {
				t.Fatalf("%q: error %v is not a 400/422 problem naming what is wrong", body, err)
			}
			checkMalformedAt(t, body, p.Detail)
			return
		}
		if len(pts) < 1 || len(pts) > maxPoints {
			t.Fatalf("%q: %d points accepted", body, len(pts))
		}
		for _, p := range pts {
			if p.ID == "" || len(p.ID) > MaxPointIDLen || !(p.Lng >= -180 && p.Lng <= 180) || !(p.Lat >= -90 && p.Lat <= 90) {
				t.Fatalf("%q: accepted point %+v", body, p)
			}
		}
		// What was accepted is valid JSON that encoding/json reads the same.
		var again struct{ Points []Point }
		if err := json.Unmarshal(body, &again); err != nil || len(again.Points) != len(pts) {
			t.Fatalf("%q: accepted, but encoding/json says %v", body, err)
		}
		for i := range pts {
			if again.Points[i] != pts[i] {
				t.Fatalf("%q: point %d parsed as %+v, encoding/json says %+v", body, i, pts[i], again.Points[i])
			}
		}
	})
}

// checkMalformedAt fails when detail says body is malformed JSON at a byte
// other than the one encoding/json finds its first syntax error at.
func checkMalformedAt(t *testing.T, body []byte, detail string) {
	t.Helper()
	var at int64
	if _, err := fmt.Sscanf(detail, "malformed JSON at byte %d:", &at); err != nil {
		return
	}
	var syntax *json.SyntaxError
	if err := json.Unmarshal(body, new(json.RawMessage)); !errors.As(err, &syntax) {
		t.Fatalf("%q: %q, but encoding/json finds no syntax error (%v)", body, detail, err)
	} else if syntax.Offset != at {
		t.Fatalf("%q: %q, but encoding/json finds its first syntax error after %d bytes (%v)", body, detail, syntax.Offset, syntax)
	}
}

func FuzzParseFence(f *testing.F) {
	for _, s := range []string{
		`{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]},"properties":{"name":"a"}}`,
		`{"type":"Feature","geometry":{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[[[5,5],[6,5],[6,6],[5,5]]]]},"properties":{"name":"a","kind":"b"}}`,
		`{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]},"properties":{"name":"a"}}`,
		`{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0,1],[1,0],[1,1],[0,0]]]},"properties":{"name":"a"}}`,
		`{"type":"Feature","geometry":{"type":"Point","coordinates":[0,0]},"properties":{"name":"a"}}`,
		`{"type":"Feature","geometry":null,"properties":null}`,
		`{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[-0.0,0]]]},"properties":{"name":"a"}}`,
		`{}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const maxVertices = 50
		in, err := ParseFence(bytes.NewReader(body), maxVertices)
		if err != nil {
			var p *problem.Error
			if !errors.As(err, &p) || (p.Code != problem.Invalid && p.Code != problem.OutOfRange) || p.Param == "" {
				t.Fatalf("%q: error %v is not a 400/422 problem naming what is wrong", body, err)
			}
			checkMalformedAt(t, body, p.Detail)
			return
		}
		if in.Name == "" || len(in.Name) > MaxFenceNameLen || in.Kind == "" || len(in.Kind) > MaxFenceKindLen || len(in.Geometry) == 0 {
			t.Fatalf("%q: accepted %+v", body, in)
		}
		n := 0
		for _, poly := range in.Geometry {
			for _, ring := range poly {
				n += len(ring)
				// Closed bit for bit, as PostGIS compares a ring's ends
				// (0 and -0 are one number, not one bit pattern).
				first, last := ring[0], ring[len(ring)-1]
				if len(ring) < 4 || math.Float64bits(first[0]) != math.Float64bits(last[0]) || math.Float64bits(first[1]) != math.Float64bits(last[1]) {
					t.Fatalf("%q: accepted ring %v", body, ring)
				}
				for _, p := range ring {
					if !(p[0] >= -180 && p[0] <= 180 && p[1] >= -90 && p[1] <= 90) {
						t.Fatalf("%q: accepted position %v", body, p)
					}
				}
			}
		}
		if n > maxVertices {
			t.Fatalf("%q: accepted %d positions", body, n)
		}
	})
}

// TestParseLimitTooLargeIsOutOfRange: a limit of any number of digits is a
// well-formed count; beyond MaxLimit it is out of range (422), never
// malformed (400).
func TestParseLimitTooLargeIsOutOfRange(t *testing.T) {
	for _, s := range []string{"1001", "99999999999", "9223372036854775808", strings.Repeat("9", 40)} {
		_, err := ParseLimit(s, 100, 1000)
		wantProblem(t, err, problem.OutOfRange, "limit")
	}
}

// TestParseFenceIDTooLargeIsNotFound: an id of any number of digits is a
// well-formed id; one beyond every fence (past int64) names no fence (404),
// it is not malformed (400).
func TestParseFenceIDTooLargeIsNotFound(t *testing.T) {
	for _, s := range []string{"9223372036854775808", "99999999999999999999", strings.Repeat("9", 40)} {
		_, err := ParseFenceID(s)
		wantProblem(t, err, problem.NotFound, "id")
	}
}

// A malformed number's detail gives an example of what to send, and the
// example is one the same parameter takes: no negative radius.
func TestMalformedNumberExampleIsAccepted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		param string
		parse func(string) error
	}{
		{"lng", func(s string) error { _, err := ParseLng("lng", s); return err }},
		{"lat", func(s string) error { _, err := ParseLat("lat", s); return err }},
		{"radius", func(s string) error { _, err := ParseRadius(s, 50000); return err }},
	} {
		t.Run(tc.param, func(t *testing.T) {
			err := tc.parse("12,5")
			var pe *problem.Error
			if !errors.As(err, &pe) {
				t.Fatalf("12,5: %v, want a problem", err)
			}
			_, example, ok := strings.Cut(pe.Detail, "such as ")
			example, _, _ = strings.Cut(example, ",")
			if !ok || example == "" {
				t.Fatalf("no example in %q", pe.Detail)
			}
			if err := tc.parse(example); err != nil {
				t.Errorf("the example %q of %q is refused: %v", example, pe.Detail, err)
			}
		})
	}
}
