package tiles

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/paulmach/orb/maptile"
)

// TilePixels is the width of a tile on screen that the pixel settings of
// Generalize refer to: MapLibre and Mapbox draw vector tiles 512 CSS pixels
// wide.
const TilePixels = 512

// Generalize configures how a layer's tiles are generalised at low and
// middle zooms. It is on by default; every field has a default.
type Generalize struct {
	// Off serves every feature as stored at every zoom (still capped,
	// ordered and held to the byte budget).
	Off bool `yaml:"off"`
	// MaxZoom is the deepest generalised zoom (default 12, at most the
	// layer's DataMaxZoom − 1: clients overzoom the tiles of DataMaxZoom,
	// which must carry every detail).
	MaxZoom int `yaml:"maxzoom"`
	// ClusterPixels is the side of a point layer's cluster cell in pixels
	// of a 512-pixel tile: a power of two from 1 to 64 (default 8: 64×64
	// cells per tile; 4 draws up to four times the features, and costs
	// about as much more to encode).
	ClusterPixels int `yaml:"cluster_px"`
	// TolerancePixels is the simplification tolerance of line and polygon
	// overviews, in pixels (default 1; at most 8); the byte budget's
	// levels start from it.
	TolerancePixels float64 `yaml:"tolerance_px"`
	// MinSizePixels thins the line and polygon features of overviews whose
	// bounding box is smaller than this many pixels on both sides to one
	// per cluster cell (default 1; at most 8).
	MinSizePixels float64 `yaml:"min_size_px"`
}

// Defaults of Generalize.
const (
	DefaultGeneralizeMaxZoom = 12
	DefaultClusterPixels     = 8
	DefaultTolerancePixels   = 1.0
	DefaultMinSizePixels     = 1.0
	maxClusterPixels         = 64
	maxPixelSetting          = 8.0
)

func (g *Generalize) withDefaults(dataMaxZoom int) {
	if g.MaxZoom == 0 {
		g.MaxZoom = min(DefaultGeneralizeMaxZoom, max(0, dataMaxZoom-1))
	}
	if g.ClusterPixels == 0 {
		g.ClusterPixels = DefaultClusterPixels
	}
	if g.TolerancePixels == 0 {
		g.TolerancePixels = DefaultTolerancePixels
	}
	if g.MinSizePixels == 0 {
		g.MinSizePixels = DefaultMinSizePixels
	}
}

func (g Generalize) validate(dataMaxZoom int) error {
	var errs []error
	if g.MaxZoom < 0 || g.MaxZoom >= max(1, dataMaxZoom) {
		errs = append(errs, fmt.Errorf("generalize.maxzoom %d must be within 0..data_maxzoom-1 (%d)", g.MaxZoom, dataMaxZoom-1))
	}
	if g.ClusterPixels < 1 || g.ClusterPixels > maxClusterPixels || bits.OnesCount(uint(g.ClusterPixels)) != 1 {
		errs = append(errs, fmt.Errorf("generalize.cluster_px %d must be a power of two within 1..%d", g.ClusterPixels, maxClusterPixels))
	}
	for name, v := range map[string]float64{"tolerance_px": g.TolerancePixels, "min_size_px": g.MinSizePixels} {
		if !(v >= 0 && v <= maxPixelSetting) { // also refuses NaN
			errs = append(errs, fmt.Errorf("generalize.%s %g must be within 0..%g", name, v, maxPixelSetting))
		}
	}
	return errors.Join(errs...)
}

// Generalization is what a layer's generalisation does at one zoom: a pure
// function of the zoom, the layer's Generalize settings and its extent
// (see Generalize.At). Lengths are given in EPSG:3857 metres, for queries
// on the stored geometries, and in tile units (1/extent of the tile's
// width), for queries on the output of ST_AsMVTGeom.
type Generalization struct {
	Zoom maptile.Zoom
	// On is false beyond Generalize.MaxZoom (or with Generalize.Off):
	// features are served as stored. The cluster grid is defined either
	// way: the byte budget falls back on it (see Budget).
	On bool
	// CellsPerTile is the number of cluster cells along a tile's side (a
	// power of two), CellMetres the side of one cell. Cells are aligned
	// to the tile grid of the zoom, so a tile covers whole cells.
	CellsPerTile int
	CellMetres   float64
	// Tolerance and MinSize are the zoom's simplification tolerance and
	// smallest feature kept (lines and polygons), applied when On; the
	// byte budget's levels scale them either way.
	ToleranceMetres, ToleranceUnits float64
	MinSizeMetres, MinSizeUnits     float64
}

// worldWidth is the width of the EPSG:3857 world square in metres.
const worldWidth = 2 * worldHalf

// TileWidth is the width in EPSG:3857 metres of a tile at zoom z.
func TileWidth(z maptile.Zoom) float64 { return worldWidth / float64(uint64(1)<<z) }

// At returns the generalisation of a tile at zoom z of a layer with the
// given extent (tile units per tile side). g must be valid (as Layer
// validation ensures): ClusterPixels a power of two.
func (g Generalize) At(z maptile.Zoom, extent int) Generalization {
	pixel := TileWidth(z) / TilePixels // metres
	unitsPerPixel := float64(extent) / TilePixels
	cells := TilePixels / max(1, g.ClusterPixels)
	out := Generalization{
		Zoom:         z,
		On:           !g.Off && int(z) <= g.MaxZoom,
		CellsPerTile: cells,
		// TileWidth / cells rather than pixel × ClusterPixels: both are
		// exact power-of-two scalings of worldWidth, and this form is the
		// one the overview builder and its tests use.
		CellMetres: TileWidth(z) / float64(cells),
	}
	out.ToleranceMetres, out.ToleranceUnits = g.TolerancePixels*pixel, g.TolerancePixels*unitsPerPixel
	out.MinSizeMetres, out.MinSizeUnits = g.MinSizePixels*pixel, g.MinSizePixels*unitsPerPixel
	return out
}

// BufferCells is how many whole cells beyond each side of a tile its
// query keeps: buffer units over units per cell, rounded up. It is the
// same for every tile.
func (g Generalization) BufferCells(extent, buffer int) int64 {
	return (int64(buffer)*int64(g.CellsPerTile) + int64(extent) - 1) / int64(extent)
}

// CellRange returns the inclusive range of cluster cell indices a tile's
// query keeps: the cells of the tile itself and of its buffer (rounded up
// to whole cells). Cell (cx, cy) covers x in [cx·CellMetres − π·R,
// (cx+1)·CellMetres − π·R) and likewise y, counted from the south-west
// corner of the world, so the index of a point is
// floor((x + π·R) / CellMetres).
func (g Generalization) CellRange(t maptile.Tile, extent, buffer int) (x0, x1, y0, y1 int64) {
	n := int64(g.CellsPerTile)
	b := g.BufferCells(extent, buffer)
	row := int64(uint64(1)<<t.Z) - 1 - int64(t.Y) //nolint:gosec // G115: t.Z <= MaxZoom, so 2^t.Z fits int64; tile rows counted from the south
	x0, x1 = int64(t.X)*n-b, (int64(t.X)+1)*n-1+b
	y0, y1 = row*n-b, (row+1)*n-1+b
	return x0, x1, y0, y1
}
