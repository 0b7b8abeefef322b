package loadtest

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

var testAnchors = []orb.Point{{13.405, 52.52}, {-74.006, 40.7128}, {151.2093, -33.8688}, {100, -89.9}}

func TestSampleTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	anchors := slices.Clone(testAnchors)
	for range 96 {
		anchors = append(anchors, orb.Point{rng.Float64()*360 - 180, rng.Float64()*170 - 85})
	}
	a := SampleTiles(7, 200, 0, 16, anchors)
	if !slices.Equal(a, SampleTiles(7, 200, 0, 16, anchors)) {
		t.Fatal("the same seed gave another sample")
	}
	if slices.Equal(a, SampleTiles(8, 200, 0, 16, anchors)) {
		t.Fatal("seeds 7 and 8 gave the same sample")
	}
	if len(a) < 190 || len(a) > 200 {
		t.Fatalf("%d tiles, want about 200 (a few low-zoom repeats may be dropped)", len(a))
	}
	seen := map[maptile.Tile]bool{}
	anchored, zooms := 0, map[maptile.Zoom]int{}
	for _, tl := range a {
		if seen[tl] || !tl.Valid() || tl.Z > 16 {
			t.Fatalf("tile %v repeated, invalid or above z16", tl)
		}
		seen[tl] = true
		zooms[tl.Z]++
		for _, p := range anchors {
			if tl.Bound().Contains(orb.Point{p[0], clampLat(p[1])}) {
				anchored++
				break
			}
		}
	}
	// Half the draws are under an anchor; some "anywhere" ones at low zoom
	// happen to be too.
	if anchored < 90 || anchored > 150 {
		t.Errorf("%d of %d tiles under an anchor, want about half", anchored, len(a))
	}
	if len(zooms) != 17 {
		t.Errorf("zooms drawn: %v, want all of 0..16", zooms)
	}
	if got := SampleTiles(1, 50, 3, 3, nil); len(got) != 50 {
		t.Errorf("64 tiles at z3, 50 wanted: got %d", len(got))
	}
	if got := SampleTiles(1, 10, 0, 0, nil); len(got) != 1 {
		t.Errorf("z0 has one tile: got %d", len(got))
	}
	for _, bad := range [][3]int{{0, 0, 16}, {5, -1, 3}, {5, 4, 3}, {5, 0, 23}} {
		if got := SampleTiles(1, bad[0], bad[1], bad[2], nil); got != nil {
			t.Errorf("SampleTiles(n %d, z%d..%d) = %v, want nil", bad[0], bad[1], bad[2], got)
		}
	}
}

func TestDenseTiles(t *testing.T) {
	centre := func(tl maptile.Tile) orb.Point { return tiles.Envelope(tl).Center() }
	a, b, c := maptile.New(100, 200, 10), maptile.New(5, 7, 10), maptile.New(4, 7, 10)
	pts := []orb.Point{centre(a), centre(a), centre(a), centre(b), centre(b), centre(c), centre(maptile.New(9, 9, 10)),
		{1e9, 0}, {0, -1e9}} // outside the Mercator square: ignored
	got := DenseTiles(pts, 10, 3)
	want := []maptile.Tile{a, b, c} // then by count; c before (9, 9) on x
	if !slices.Equal(got, want) {
		t.Errorf("DenseTiles = %v, want %v", got, want)
	}
	if got := DenseTiles(pts, 10, 100); len(got) != 4 {
		t.Errorf("%d tiles hold points, got %v", 4, got)
	}
	// Every point lands in the tile tiles.Envelope draws around it.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		z := maptile.Zoom(rng.IntN(17))
		tl := maptile.New(uint32(rng.IntN(1<<z)), uint32(rng.IntN(1<<z)), z)
		e := tiles.Envelope(tl)
		p := orb.Point{e.Min[0] + rng.Float64()*(e.Max[0]-e.Min[0]), e.Min[1] + rng.Float64()*(e.Max[1]-e.Min[1])}
		if got := DenseTiles([]orb.Point{p}, z, 1); len(got) != 1 || got[0] != tl {
			t.Fatalf("point %v of %v: DenseTiles gave %v", p, tl, got)
		}
	}
}

func TestAnchoredTiles(t *testing.T) {
	got := AnchoredTiles(append(testAnchors, orb.Point{13.41, 52.52}), 5, 10)
	if len(got) != 4 {
		t.Fatalf("4 distinct z5 tiles under the anchors, got %v", got)
	}
	if got[0] != maptile.At(testAnchors[0], 5) || got[3].Y != 31 {
		t.Errorf("tiles %v: want the anchors' order, the polar one clamped to the last row", got)
	}
	if got := AnchoredTiles(testAnchors, 14, 2); len(got) != 2 {
		t.Errorf("n=2: got %v", got)
	}
}

func TestCeilingLists(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var pts []orb.Point
	for range 20000 {
		pts = append(pts, orb.Point{(rng.Float64() - 0.5) * 4e7, (rng.Float64() - 0.5) * 4e7})
	}
	lists := CeilingLists(pts)
	if len(lists) != 2 || lists[0].Name != "z14" || len(lists[0].Tiles) != 396 || lists[1].Name != "z8-10" || len(lists[1].Tiles) != 132 {
		t.Fatalf("lists %v", lists)
	}
	for i, tl := range lists[1].Tiles {
		if want := maptile.Zoom(8 + i/44); tl.Z != want {
			t.Fatalf("z8-10 tile %d is z%d, want z%d", i, tl.Z, want)
		}
	}
}

func TestWriteZooms(t *testing.T) {
	var b strings.Builder
	WriteZooms(&b, "l", []ZoomRow{
		{Zoom: 1, Tiles: 1, Bytes: math.NaN(), Features: math.NaN(), DBms: 60000, MaxDBms: 60000, Censored: 1, Status: map[int]int{503: 1}},
		{Zoom: 2, Tiles: 2, Bytes: 1234.4, MaxBytes: 2000, Features: 7, DBms: 1.5, MaxDBms: 2, Status: map[int]int{200: 1, 204: 1}},
	})
	want := [][]string{
		{"1", "1", "—", "0", "—", "60000.00", "60000.00", "1", "503×1"},
		{"2", "2", "1234", "2000", "7", "1.50", "2.00", "0", "200×1", "204×1"},
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	rows := lines[len(lines)-2:]
	for i, w := range want {
		if got := strings.Fields(rows[i]); !slices.Equal(got, w) {
			t.Errorf("row %d: %q, want %q", i, got, w)
		}
	}
}
