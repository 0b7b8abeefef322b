package tiles

import "fmt"

// BuilderSubdivide is the builder of a line or polygon layer's pieces: its
// rows cut into pieces of at most Subdivide.MaxVertices vertices.
const BuilderSubdivide = "subdivide"

// Subdivide is a line or polygon layer's subdivided storage, built by
// `geotoll prepare` (on unless Off): every row cut with ST_Subdivide into
// pieces of at most MaxVertices vertices (default
// DefaultSubdivideMaxVertices), repaired where invalid, with the row's id
// and properties. The zooms above the overview band read the pieces near
// the tile instead of whole rows, and join them back into one feature per
// id (sql/tile_lines_polygons.sql). A layer without ids (without_id) has
// none.
type Subdivide struct {
	Off         bool `yaml:"off"`
	MaxVertices int  `yaml:"max_vertices"`
}

// Limits of Subdivide.MaxVertices: ST_Subdivide needs at least 5.
const (
	DefaultSubdivideMaxVertices = 256
	minSubdivideVertices        = 8
	maxSubdivideVertices        = 65535
)

func (s *Subdivide) withDefaults() {
	if s.MaxVertices == 0 {
		s.MaxVertices = DefaultSubdivideMaxVertices
	}
}

func (s Subdivide) validate() error {
	if s.MaxVertices < minSubdivideVertices || s.MaxVertices > maxSubdivideVertices {
		return fmt.Errorf("subdivide max_vertices %d must be within %d..%d", s.MaxVertices, minSubdivideVertices, maxSubdivideVertices)
	}
	return nil
}

// SubdivideZooms returns the zooms the pieces of the layer, of geometry
// kind, serve: from the zoom after the overview band (the layer's minzoom
// without one) to its maxzoom; ok is false when it has none (points,
// mixed, without ids, or Subdivide.Off).
func (l *Layer) SubdivideZooms(kind Kind) (lo, hi int, ok bool) {
	if l.Subdivide.Off || l.WithoutID || (kind != KindLine && kind != KindPolygon) {
		return 0, 0, false
	}
	lo = l.MinZoom
	if _, ovHi, ok := l.OverviewZooms(kind); ok {
		lo = ovHi + 1
	}
	return lo, l.MaxZoom, lo <= l.MaxZoom
}

// Heavy is a line or polygon layer whose largest rows exceed its
// Subdivide.MaxVertices while it reads no pieces: its tiles above the
// overview band read and clip those rows whole. Fix says what gives it
// pieces (`geotoll prepare` builds them).
type Heavy struct {
	// MaxVertices is the largest row's vertex count seen.
	MaxVertices int64 `json:"max_vertices"`
	// Limit is the layer's Subdivide.MaxVertices.
	Limit int `json:"limit"`
	// Fix is what gives the layer pieces: HeavyFix, HeavyFixSubdivideOff,
	// or empty when nothing can (a layer without ids).
	Fix string `json:"fix,omitempty"`
}
