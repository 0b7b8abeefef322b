package tiles_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
	"github.com/paulmach/orb/project"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// wantProblem fails unless err is a *problem.Error with the given HTTP
// status and param.
func wantProblem(t testing.TB, err error, status int, param string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want a %d problem for %q", status, param)
	}
	var p *problem.Error
	if !errors.As(err, &p) {
		t.Fatalf("err = %T %v, want *problem.Error", err, err)
	}
	if got := problem.Status(p.Code); got != status {
		t.Errorf("status = %d (code %q), want %d; err: %v", got, p.Code, status, err)
	}
	if p.Param != param {
		t.Errorf("param = %q, want %q; err: %v", p.Param, param, err)
	}
}

const maxXY = 1<<tiles.MaxZoom - 1 // 4194303

func TestParseTile(t *testing.T) {
	t.Parallel()
	ok := []struct {
		name    string
		z, x, y string
		want    maptile.Tile
	}{
		{name: "world", z: "0", x: "0", y: "0", want: maptile.New(0, 0, 0)},
		{name: "deepest corner", z: "22", x: "4194303", y: "4194303", want: maptile.New(maxXY, maxXY, 22)},
		{name: "deepest origin", z: "22", x: "0", y: "0", want: maptile.New(0, 0, 22)},
		{name: "berlin z14", z: "14", x: "8802", y: "5373", want: maptile.New(8802, 5373, 14)},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tiles.ParseTile(tc.z, tc.x, tc.y)
			if err != nil {
				t.Fatalf("ParseTile(%q, %q, %q): %v", tc.z, tc.x, tc.y, err)
			}
			if got != tc.want {
				t.Errorf("ParseTile(%q, %q, %q) = %v, want %v", tc.z, tc.x, tc.y, got, tc.want)
			}
			if !got.Valid() {
				t.Errorf("%v is not Valid()", got)
			}
		})
	}

	bad := []struct {
		name    string
		z, x, y string
		status  int
		param   string
	}{
		{name: "empty z", z: "", x: "0", y: "0", status: 400, param: "z"},
		{name: "empty x", z: "0", x: "", y: "0", status: 400, param: "x"},
		{name: "empty y", z: "0", x: "0", y: "", status: 400, param: "y"},
		{name: "negative", z: "-1", x: "0", y: "0", status: 400, param: "z"},
		{name: "plus sign", z: "+1", x: "0", y: "0", status: 400, param: "z"},
		{name: "leading zero of z", z: "01", x: "0", y: "0", status: 400, param: "z"},
		{name: "leading zeros of x", z: "1", x: "0001", y: "0", status: 400, param: "x"},
		{name: "zero written twice", z: "1", x: "0", y: "00", status: 400, param: "y"},
		{name: "leading space", z: "1", x: " 1", y: "0", status: 400, param: "x"},
		{name: "trailing space", z: "1", x: "0", y: "1 ", status: 400, param: "y"},
		{name: "exponent", z: "1", x: "1e3", y: "0", status: 400, param: "x"},
		{name: "hex", z: "1", x: "0", y: "0x10", status: 400, param: "y"},
		{name: "full-width digit", z: "１", x: "0", y: "0", status: 400, param: "z"},
		{name: "arabic-indic digit", z: "1", x: "٠", y: "0", status: 400, param: "x"},
		{name: "11 digits", z: "1", x: "00000000001", y: "0", status: 400, param: "x"},
		{name: "uint64 overflow", z: "1", x: "0", y: "99999999999999999999999", status: 400, param: "y"},
		{name: "decimal", z: "1.5", x: "0", y: "0", status: 400, param: "z"},
		{name: "NUL", z: "1\x00", x: "0", y: "0", status: 400, param: "z"},
		{name: "malformed z reported before bad x", z: "a", x: "b", y: "c", status: 400, param: "z"},
		{name: "z 23", z: "23", x: "0", y: "0", status: 422, param: "z"},
		{name: "z 10 digits", z: "9999999999", x: "0", y: "0", status: 422, param: "z"},
		{name: "z 64", z: "64", x: "0", y: "0", status: 422, param: "z"},
		{name: "x = 2^0", z: "0", x: "1", y: "0", status: 422, param: "x"},
		{name: "y = 2^0", z: "0", x: "0", y: "1", status: 422, param: "y"},
		{name: "x = 2^14", z: "14", x: "16384", y: "0", status: 422, param: "x"},
		{name: "y = 2^14", z: "14", x: "0", y: "16384", status: 422, param: "y"},
		{name: "x = 2^22", z: "22", x: "4194304", y: "0", status: 422, param: "x"},
		{name: "y = 2^22", z: "22", x: "0", y: "4194304", status: 422, param: "y"},
		{name: "x max uint32", z: "22", x: "4294967295", y: "0", status: 422, param: "x"},
		{name: "x beyond uint32", z: "22", x: "4294967296", y: "0", status: 422, param: "x"},
		{name: "y 10 digits", z: "5", x: "0", y: "9999999999", status: 422, param: "y"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tiles.ParseTile(tc.z, tc.x, tc.y)
			wantProblem(t, err, tc.status, tc.param)
			if got != (maptile.Tile{}) {
				t.Errorf("ParseTile returned tile %v with an error", got)
			}
		})
	}
}

// TestAddressDetails: a refused address says what would have been valid —
// the range of x or y at that zoom, the format asked for (up to 16 bytes of
// it, then an ellipsis).
func TestAddressDetails(t *testing.T) {
	t.Parallel()
	split := func(seg string) func() error {
		return func() error { _, err := tiles.SplitFormat(seg); return err }
	}
	parse := func(z, x, y string) func() error {
		return func() error { _, err := tiles.ParseTile(z, x, y); return err }
	}
	for _, tc := range []struct {
		call   func() error
		detail string
	}{
		{parse("1", "2", "0"), "x 2 is outside 0..1 at zoom 1"},
		{parse("14", "0", "16384"), "y 16384 is outside 0..16383 at zoom 14"},
		{split("12.png"), `format "png" is not served; use .mvt or .pbf`},
		{split("12.abcdefghijklmnop"), `format "abcdefghijklmnop" is not served; use .mvt or .pbf`}, // 16 bytes
		{split("12.abcdefghijklmnopq"), `format "abcdefghijklmnop…" is not served; use .mvt or .pbf`},
	} {
		if got := problem.From(tc.call()).Detail; got != tc.detail {
			t.Errorf("detail %q, want %q", got, tc.detail)
		}
	}
}

// TestSplitFormatDetailIsBounded: a problem's detail quotes request text,
// but never more than a few bytes of it.
func TestSplitFormatDetailIsBounded(t *testing.T) {
	t.Parallel()
	_, err := tiles.SplitFormat("1." + strings.Repeat("x", 4096))
	wantProblem(t, err, http.StatusNotFound, "format")
	if d := problem.From(err).Detail; len(d) > 128 {
		t.Errorf("detail echoes %d bytes of request text: %.80q…", len(d), d)
	}
}

func TestSplitFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, seg string
		want      string
		status    int // 0: success
	}{
		{name: "mvt", seg: "12.mvt", want: "12"},
		{name: "pbf", seg: "12.pbf", want: "12"},
		{name: "last dot wins", seg: "1.2.mvt", want: "1.2"},
		{name: "empty number", seg: ".mvt", want: ""},
		{name: "png", seg: "12.png", status: 404},
		{name: "geojson", seg: "12.geojson", status: 404},
		{name: "upper case", seg: "12.MVT", status: 404},
		{name: "trailing dot", seg: "12.", status: 404},
		{name: "no dot", seg: "12", status: 404},
		{name: "empty", seg: "", status: 404},
		{name: "mvt then more", seg: "12.mvt.gz", status: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tiles.SplitFormat(tc.seg)
			if tc.status != 0 {
				wantProblem(t, err, tc.status, "format")
				return
			}
			if err != nil {
				t.Fatalf("SplitFormat(%q): %v", tc.seg, err)
			}
			if got != tc.want {
				t.Errorf("SplitFormat(%q) = %q, want %q", tc.seg, got, tc.want)
			}
		})
	}
}

// worldHalf is half the EPSG:3857 world square (π × WGS84 semi-major axis).
const worldHalf = 20037508.342789244

func TestEnvelopeKnownTiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		tile maptile.Tile
		want orb.Bound
	}{
		{
			name: "world",
			tile: maptile.New(0, 0, 0),
			want: orb.Bound{Min: orb.Point{-worldHalf, -worldHalf}, Max: orb.Point{worldHalf, worldHalf}},
		},
		{
			name: "z1 north-west",
			tile: maptile.New(0, 0, 1),
			want: orb.Bound{Min: orb.Point{-worldHalf, 0}, Max: orb.Point{0, worldHalf}},
		},
		{
			name: "z1 south-east",
			tile: maptile.New(1, 1, 1),
			want: orb.Bound{Min: orb.Point{0, -worldHalf}, Max: orb.Point{worldHalf, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tiles.Envelope(tc.tile); got != tc.want {
				t.Errorf("Envelope(%v) = %v, want %v", tc.tile, got, tc.want)
			}
		})
	}
}

// TestEnvelopeTiles checks that neighbouring tiles share their edges exactly
// and that every tile has the width of its zoom.
func TestEnvelopeTiles(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		z := maptile.Zoom(rng.IntN(int(tiles.MaxZoom) + 1))
		n := uint32(1) << z
		tile := maptile.New(rng.Uint32N(n), rng.Uint32N(n), z)
		e := tiles.Envelope(tile)
		size := 2 * worldHalf / float64(n)
		if !(e.Min[0] < e.Max[0] && e.Min[1] < e.Max[1]) {
			t.Fatalf("Envelope(%v) = %v is empty", tile, e)
		}
		if w, h := e.Max[0]-e.Min[0], e.Max[1]-e.Min[1]; math.Abs(w-size) > 1e-6 || math.Abs(h-size) > 1e-6 {
			t.Fatalf("Envelope(%v) is %g × %g m, want %g", tile, w, h, size)
		}
		if tile.X+1 < n {
			if right := tiles.Envelope(maptile.New(tile.X+1, tile.Y, z)); right.Min[0] != e.Max[0] {
				t.Fatalf("%v and its east neighbour do not share an edge: %v vs %v", tile, e.Max[0], right.Min[0])
			}
		}
		if tile.Y+1 < n {
			if below := tiles.Envelope(maptile.New(tile.X, tile.Y+1, z)); below.Max[1] != e.Min[1] {
				t.Fatalf("%v and its south neighbour do not share an edge: %v vs %v", tile, e.Min[1], below.Max[1])
			}
		}
		if z > 0 {
			if p := tiles.Envelope(tile.Parent()); !p.Contains(e.Min) || !p.Contains(e.Max) {
				t.Fatalf("Envelope(%v) = %v lies outside its parent's %v", tile, e, p)
			}
		}
	}
}

// TestEnvelopeAgreesWithOrb compares Envelope with the long way round:
// orb's lon/lat t.Bound() projected back with project.WGS84.ToMercator.
// Envelope divides the ±π·R square exactly; the round trip through
// atan(sinh) and log(tan) is only close, so the tolerance here is loose
// (the exact comparison is against PostGIS, in store_test.go).
func TestEnvelopeAgreesWithOrb(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var cases []maptile.Tile
	for z := maptile.Zoom(0); z <= tiles.MaxZoom; z++ {
		n := uint32(1) << z
		cases = append(cases,
			maptile.New(0, 0, z), maptile.New(n-1, n-1, z),
			maptile.New(0, n-1, z), maptile.New(n-1, 0, z),
			maptile.New(n/2, n/2, z))
		for range 20 {
			cases = append(cases, maptile.New(rng.Uint32N(n), rng.Uint32N(n), z))
		}
	}
	worst := 0.0
	for _, tile := range cases {
		got := tiles.Envelope(tile)
		b := tile.Bound()
		want := orb.Bound{
			Min: project.WGS84.ToMercator(b.Min),
			Max: project.WGS84.ToMercator(b.Max),
		}
		// 1 mm: loose on purpose (the round trip is off by ~1e-8 m), yet
		// under half an MVT unit (4096 per tile) even at z22, where a
		// tile is 9.6 m wide.
		const tol = 1e-3
		for i, pair := range [][2]float64{
			{got.Min[0], want.Min[0]}, {got.Min[1], want.Min[1]},
			{got.Max[0], want.Max[0]}, {got.Max[1], want.Max[1]},
		} {
			d := math.Abs(pair[0] - pair[1])
			worst = max(worst, d)
			if d > tol {
				t.Errorf("Envelope(%v) coordinate %d = %.9f, orb round trip %.9f: off by %g m (tolerance %g)",
					tile, i, pair[0], pair[1], d, tol)
			}
		}
	}
	t.Logf("largest difference from the orb round trip over %d tiles: %g m", len(cases), worst)
}

func FuzzParseTile(f *testing.F) {
	for _, s := range [][3]string{
		{"0", "0", "0"}, {"22", "4194303", "4194303"}, {"23", "0", "0"},
		{"14", "16384", "0"}, {"-1", "+1", " 1"}, {"1e3", "0x10", "１"},
		{"00000000001", "1.5", ""}, {"4294967296", "18446744073709551616", "9999999999"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, z, x, y string) {
		tile, err := tiles.ParseTile(z, x, y)
		if err != nil {
			var p *problem.Error
			if !errors.As(err, &p) {
				t.Fatalf("ParseTile(%q, %q, %q) error %T %v is not a *problem.Error", z, x, y, err, err)
			}
			if s := problem.Status(p.Code); s != 400 && s != 422 {
				t.Fatalf("ParseTile(%q, %q, %q) status %d, want 400 or 422", z, x, y, s)
			}
			if p.Param != "z" && p.Param != "x" && p.Param != "y" {
				t.Fatalf("ParseTile(%q, %q, %q) names param %q", z, x, y, p.Param)
			}
			return
		}
		if !tile.Valid() || tile.Z > tiles.MaxZoom {
			t.Fatalf("ParseTile(%q, %q, %q) = %v: not a valid tile within MaxZoom", z, x, y, tile)
		}
		for _, s := range []string{z, x, y} {
			if s == "" || len(s) > 10 || strings.Trim(s, "0123456789") != "" {
				t.Fatalf("ParseTile accepted %q, which is not 1–10 ASCII digits", s)
			}
		}
		if got := fmt.Sprintf("%d/%d/%d", tile.Z, tile.X, tile.Y); got != z+"/"+x+"/"+y {
			t.Fatalf("ParseTile accepted %s/%s/%s, another address of %s: one tile, one address", z, x, y, got)
		}
		if e := tiles.Envelope(tile); !(e.Min[0] < e.Max[0] && e.Min[1] < e.Max[1]) {
			t.Fatalf("Envelope(%v) = %v is empty", tile, e)
		}
	})
}

func BenchmarkEnvelope(b *testing.B) {
	tile := maptile.At(orb.Point{13.405, 52.52}, 14)
	b.ReportAllocs()
	var sink orb.Bound
	for b.Loop() {
		sink = tiles.Envelope(tile)
	}
	_ = sink
}
