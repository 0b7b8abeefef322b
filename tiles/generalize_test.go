package tiles_test

import (
	"math"
	"math/bits"
	"strings"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// generalizeFrom builds a valid Generalize from fuzzed numbers.
func generalizeFrom(cellShift uint8, tolerance, minSize float64, maxZoom uint8, off bool) tiles.Generalize {
	return tiles.Generalize{
		Off: off, MaxZoom: int(maxZoom % 16), ClusterPixels: 1 << (cellShift % 7),
		TolerancePixels: math.Mod(math.Abs(tolerance), 8), MinSizePixels: math.Mod(math.Abs(minSize), 8),
	}
}

func TestGeneralizeAt(t *testing.T) {
	t.Parallel()
	g := tiles.Generalize{MaxZoom: 12, ClusterPixels: 4, TolerancePixels: 1, MinSizePixels: 0.5}
	for _, tc := range []struct {
		z                  maptile.Zoom
		on                 bool
		cells              int
		cellM, tolM, tolU  float64
		minM, minU, extent float64
	}{
		// z0: the world is 40,075,016.686 m wide, a pixel 78,271.517 m.
		{z: 0, on: true, cells: 128, cellM: 313086.06785608194, tolM: 78271.51696402048, tolU: 8, minM: 39135.75848201024, minU: 4, extent: 4096},
		{z: 2, on: true, cells: 128, cellM: 78271.51696402048, tolM: 19567.87924100512, tolU: 8, minM: 9783.93962050256, minU: 4, extent: 4096},
		{z: 12, on: true, cells: 128, cellM: 76.43702828517625, tolM: 19.109257071294063, tolU: 1, minM: 9.554628535647032, minU: 0.5, extent: 512},
		{z: 13, on: false, cells: 128, cellM: 38.21851414258813, tolM: 9.554628535647032, tolU: 8, minM: 4.777314267823516, minU: 4, extent: 4096},
	} {
		got := g.At(tc.z, int(tc.extent))
		want := tiles.Generalization{Zoom: tc.z, On: tc.on, CellsPerTile: tc.cells, CellMetres: tc.cellM,
			ToleranceMetres: tc.tolM, ToleranceUnits: tc.tolU, MinSizeMetres: tc.minM, MinSizeUnits: tc.minU}
		if got != want {
			t.Errorf("At(%d, %v):\n got %+v\nwant %+v", tc.z, tc.extent, got, want)
		}
	}
	if g.Off = true; g.At(0, 4096).On {
		t.Error("Off generalises z0")
	}
}

// FuzzGeneralizeAt holds the arithmetic the overviews rely on: cells tile
// a tile exactly, a cell of zoom z is exactly two of zoom z+1 (so the
// builder merges cells by halving their indices), and lengths scale with
// the pixel.
func FuzzGeneralizeAt(f *testing.F) {
	f.Add(uint8(2), 1.0, 1.0, uint8(12), false, uint8(5), uint16(4096))
	f.Add(uint8(0), 0.5, 3.0, uint8(0), true, uint8(21), uint16(256))
	f.Add(uint8(6), 7.9, 0.0, uint8(15), false, uint8(0), uint16(16384))
	f.Fuzz(func(t *testing.T, cellShift uint8, tol, minSize float64, maxZoom uint8, off bool, zoom uint8, extent uint16) {
		if math.IsNaN(tol) || math.IsNaN(minSize) || math.IsInf(tol, 0) || math.IsInf(minSize, 0) {
			return
		}
		g := generalizeFrom(cellShift, tol, minSize, maxZoom, off)
		z := maptile.Zoom(zoom % uint8(tiles.MaxZoom))
		ext := 256 + int(extent)%(16384-256+1)
		a, b := g.At(z, ext), g.At(z+1, ext)
		if a.CellsPerTile*g.ClusterPixels != tiles.TilePixels || bits.OnesCount(uint(a.CellsPerTile)) != 1 {
			t.Fatalf("%d cells of %d px in a %d px tile", a.CellsPerTile, g.ClusterPixels, tiles.TilePixels)
		}
		if a.CellMetres*float64(a.CellsPerTile) != tiles.TileWidth(z) {
			t.Fatalf("z%d: %d cells of %v m do not make a tile of %v m", z, a.CellsPerTile, a.CellMetres, tiles.TileWidth(z))
		}
		if a.CellMetres != 2*b.CellMetres {
			t.Fatalf("z%d cell %v m is not twice z%d's %v m", z, a.CellMetres, z+1, b.CellMetres)
		}
		pixel := tiles.TileWidth(z) / tiles.TilePixels
		if !near(a.ToleranceMetres, g.TolerancePixels*pixel) || !near(a.MinSizeMetres, g.MinSizePixels*pixel) ||
			!near(a.ToleranceUnits, g.TolerancePixels*float64(ext)/tiles.TilePixels) ||
			!near(a.MinSizeUnits, g.MinSizePixels*float64(ext)/tiles.TilePixels) {
			t.Fatalf("lengths %+v for %+v at z%d extent %d", a, g, z, ext)
		}
		if a.On != (!g.Off && int(z) <= g.MaxZoom) {
			t.Fatalf("On %v for %+v at z%d", a.On, g, z)
		}
	})
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// FuzzCellRange: the cells a tile's query keeps are the tile's own plus
// its buffer rounded up to whole cells, they cover the buffered envelope,
// and they overshoot it by less than a cell on each side.
func FuzzCellRange(f *testing.F) {
	f.Add(uint8(2), uint32(2), uint32(1), uint8(2), uint16(4096), uint16(64))
	f.Add(uint8(0), uint32(0), uint32(0), uint8(0), uint16(256), uint16(0))
	f.Add(uint8(22), uint32(4194303), uint32(17), uint8(6), uint16(4000), uint16(1999))
	f.Fuzz(func(t *testing.T, zoom uint8, x, y uint32, cellShift uint8, extent, buffer uint16) {
		z := maptile.Zoom(zoom % uint8(tiles.MaxZoom+1))
		n := uint32(1) << z
		tile := maptile.New(x%n, y%n, z)
		ext := 256 + int(extent)%(16384-256+1)
		buf := int(buffer) % (ext/2 + 1)
		g := generalizeFrom(cellShift, 1, 1, 12, false).At(z, ext)
		x0, x1, y0, y1 := g.CellRange(tile, ext, buf)
		cells := int64(g.CellsPerTile)
		b := (int64(buf)*cells + int64(ext) - 1) / int64(ext)
		if x1-x0+1 != cells+2*b || y1-y0+1 != cells+2*b {
			t.Fatalf("%v: cells x %d..%d, y %d..%d; want %d + 2×%d each", tile, x0, x1, y0, y1, cells, b)
		}
		env := tiles.Envelope(tile)
		bufM := tiles.TileWidth(z) * float64(buf) / float64(ext)
		half := tiles.TileWidth(0) / 2
		slack := 1e-6 * tiles.TileWidth(0) // float rounding of coordinates near ±π·R
		lo, hi := float64(x0)*g.CellMetres-half, float64(x1+1)*g.CellMetres-half
		if lo > env.Min[0]-bufM+slack || hi < env.Max[0]+bufM-slack || env.Min[0]-bufM-lo >= g.CellMetres+slack || hi-(env.Max[0]+bufM) >= g.CellMetres+slack {
			t.Fatalf("%v: cells cover x %v..%v, the buffered envelope %v..%v", tile, lo, hi, env.Min[0]-bufM, env.Max[0]+bufM)
		}
		lo, hi = float64(y0)*g.CellMetres-half, float64(y1+1)*g.CellMetres-half
		if lo > env.Min[1]-bufM+slack || hi < env.Max[1]+bufM-slack || env.Min[1]-bufM-lo >= g.CellMetres+slack || hi-(env.Max[1]+bufM) >= g.CellMetres+slack {
			t.Fatalf("%v: cells cover y %v..%v, the buffered envelope %v..%v", tile, lo, hi, env.Min[1]-bufM, env.Max[1]+bufM)
		}
	})
}

func TestBudgetFor(t *testing.T) {
	t.Parallel()
	g := tiles.Generalize{MaxZoom: 12, ClusterPixels: 4}
	for _, tc := range []struct {
		name string
		kind tiles.Kind
		z    maptile.Zoom
		px   int
		want int
	}{
		{"points, clustered: 128 cells merge into one in 7 levels", tiles.KindPoint, 5, 4, 7},
		{"points, not clustered: one level more", tiles.KindPoint, 14, 4, 8},
		{"points, 64 px cells", tiles.KindPoint, 5, 64, 3},
		{"points, one cell per tile", tiles.KindPoint, 5, 512, 1},
		{"polygons", tiles.KindPolygon, 5, 4, 8},
		{"lines", tiles.KindLine, 20, 4, 8},
		{"mixed", tiles.KindMixed, 2, 4, 8},
	} {
		g.ClusterPixels = tc.px
		b := tiles.BudgetFor(tc.kind, g.At(tc.z, 4096), 1234)
		if b.LastLevel != tc.want || b.Bytes != 1234 {
			t.Errorf("%s: %+v, want last level %d", tc.name, b, tc.want)
		}
	}
}

func FuzzParseOrderKey(f *testing.F) {
	for _, s := range []string{"rank", "rank desc", "rank ASC", "population  DeSc", " id ", "desc", "a b desc", "", " asc", "x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := tiles.ParseOrderKey(s)
		if err != nil {
			if k != (tiles.OrderKey{}) {
				t.Fatalf("error %v with a key %+v", err, k)
			}
			return
		}
		if k.Column == "" || strings.ContainsRune(k.Column, 0) || k.Column != strings.TrimSpace(k.Column) {
			t.Fatalf("%q parsed to column %q", s, k.Column)
		}
		dir := " asc"
		if k.Desc {
			dir = " desc"
		}
		again, err := tiles.ParseOrderKey(k.Column + dir)
		if err != nil || again != k {
			t.Fatalf("%q → %+v, and %q → %+v, %v", s, k, k.Column+dir, again, err)
		}
	})
}

func TestKindOfType(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]tiles.Kind{
		"POINT": tiles.KindPoint, "MULTIPOINT": tiles.KindPoint, "POINTZ": tiles.KindPoint, "multipointm": tiles.KindPoint,
		"LINESTRING": tiles.KindLine, "MULTILINESTRINGZM": tiles.KindLine,
		"POLYGON": tiles.KindPolygon, "MULTIPOLYGON": tiles.KindPolygon, "POLYGONZ": tiles.KindPolygon,
		"GEOMETRY": tiles.KindMixed, "GEOMETRYCOLLECTION": tiles.KindMixed, "": tiles.KindMixed, "TIN": tiles.KindMixed,
	} {
		if got := tiles.KindOfType(typ); got != want {
			t.Errorf("KindOfType(%q) = %q, want %q", typ, got, want)
		}
	}
}
