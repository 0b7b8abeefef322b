package throttle

import (
	"fmt"
	"math"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
)

// Weights price a request from its own parameters. The prices are pure
// functions, cheap enough to run on every request before any I/O: the
// estimate must never cost a query of its own.
//
// Every price is Base plus non-negative terms, clamped to [Base, MaxCost],
// and is monotonic non-decreasing in area, radius, limit and points. Inputs
// that cannot be measured (NaN) are priced as the worst case (MaxCost when
// their weight is non-zero); negative sizes count as zero. Prices are defined
// for Weights that pass Validate.
type Weights struct {
	Base    float64 // every request costs at least this (also the price of a cache hit)
	MaxCost float64 // a price never exceeds this

	// Work is the database time a request takes from what it reads (see
	// Read): the price of a request whose work is estimated.
	Work WorkModel

	// The price from the request's size alone, while no estimate of its
	// work is at hand (a layer whose density model is not built yet).
	AreaWeight    float64 // tokens per square degree of lon/lat area (tiles, bbox)
	RadiusWeight  float64 // tokens per km of search radius
	FeatureWeight float64 // tokens per requested feature (limit)
	PointWeight   float64 // tokens per point of a batch check
}

// DefaultWeights returns the starting weights. A token is about 10 ms of
// database time (toll.DefaultMsPerToken) on the machine the work model was
// fitted on: 2 cores, PostgreSQL 15 and PostGIS 3 with jit off, the data in
// memory; `geotoll calibrate` fits Work to your own database.
//
//   - Work {0.2 ms a query, 0.005 ms a feature, 0.00006 ms a vertex}:
//     `geotoll calibrate` on 1M points around world cities (5 µs a cluster
//     or point read, 4 µs a point clustered by the query itself) and on
//     250 country polygons (1.7M vertices: 0.06 µs a vertex read and
//     clipped; a feature's own 0.04 ms is within the vertices' noise). A
//     point's one vertex adds 1 % to its feature, so one model prices both.
//   - Base 0.01 (0.1 ms): the least a request costs — a cache hit; a tile
//     of an empty place costs its query, 0.02.
//   - MaxCost 60 (600 ms): one request never takes more than 60 tokens,
//     which must be below every tier's capacity so that every request can
//     be admitted.
//
// While a layer's density model is not built yet (the first seconds after
// start-up), a request is priced by its size instead, erring high for
// large areas (not for small tiles: from z12 up a tile's area costs about
// the base price, so toll prices such a tile as the model's empty tile;
// settlement charges one that runs past the settle floor what it ran):
//
//   - AreaWeight 0.5 per square degree: at the equator a z14 tile (0.0005
//     square degrees) adds 0.0002 tokens, a z8 tile (2) about 1, a z6 tile
//     (32) about 16, and z5 and lower (126+) hit MaxCost.
//   - RadiusWeight 1.2 per km: the largest radius the API accepts (50 km)
//     costs MaxCost.
//   - FeatureWeight 0.002: a limit of 1000 features adds 2 tokens.
//   - PointWeight 0.05: a batch check of 20 points costs one token more.
func DefaultWeights() Weights {
	return Weights{
		Base:          0.01,
		AreaWeight:    0.5,
		RadiusWeight:  1.2,
		FeatureWeight: 0.002,
		PointWeight:   0.05,
		MaxCost:       60,
		Work:          WorkModel{QueryMS: 0.2, FeatureMS: 0.005, VertexMS: 0.00006},
	}
}

// Validate reports whether the weights price sanely: Base finite and at
// least a micro-token (a spend must cost something a store can charge),
// every weight finite and >= 0, and MaxCost finite and >= Base.
func (w Weights) Validate() error {
	if !finitePositive(w.Base) || toMicro(w.Base) < 1 {
		return fmt.Errorf("throttle: weights: base %v must be finite and at least a micro-token (1e-6): a store charges nothing less", w.Base)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"query ms", w.Work.QueryMS},
		{"feature ms", w.Work.FeatureMS},
		{"vertex ms", w.Work.VertexMS},
		{"area weight", w.AreaWeight},
		{"radius weight", w.RadiusWeight},
		{"feature weight", w.FeatureWeight},
		{"point weight", w.PointWeight},
	} {
		if !(f.v >= 0) || math.IsInf(f.v, 1) {
			return fmt.Errorf("throttle: weights: %s %v must be finite and >= 0", f.name, f.v)
		}
	}
	if !(w.MaxCost >= w.Base) || math.IsInf(w.MaxCost, 1) {
		return fmt.Errorf("throttle: weights: max cost %v must be finite and >= base %v", w.MaxCost, w.Base)
	}
	return nil
}

// Tile prices a tile: Base + the area of t.Bound() in square degrees ×
// AreaWeight, clamped to [Base, MaxCost]. A parent tile never costs less than
// any of its children. A tile that does not exist at its zoom (x or y out of
// range, z > 31) costs MaxCost: the caller should have refused it with 422
// before pricing, and if it did not, erring high is the safe side.
func (w Weights) Tile(t maptile.Tile) float64 {
	if !t.Valid() {
		return w.MaxCost
	}
	return w.clamp(w.Base + term(area(t.Bound()), w.AreaWeight))
}

// BBox prices a bounding-box query: Base + area × AreaWeight + limit ×
// FeatureWeight, clamped. The area is |Δlon| × |Δlat| in square degrees; a
// bbox that crosses the antimeridian must be normalised (or split) by the
// caller first.
func (w Weights) BBox(b orb.Bound, limit int) float64 {
	return w.clamp(w.Base + term(area(b), w.AreaWeight) + term(float64(limit), w.FeatureWeight))
}

// Radius prices a radius query: Base + radiusM/1000 × RadiusWeight + limit ×
// FeatureWeight, clamped. radiusM is in metres on the ground (geography), not
// degrees.
func (w Weights) Radius(radiusM float64, limit int) float64 {
	return w.clamp(w.Base + term(radiusM/1000, w.RadiusWeight) + term(float64(limit), w.FeatureWeight))
}

// Batch prices a batch check of points: Base + points × PointWeight, clamped.
func (w Weights) Batch(points int) float64 {
	return w.clamp(w.Base + term(float64(points), w.PointWeight))
}

// Read prices what a request reads: the database time Work predicts for
// its features and vertices, in tokens of msPerToken milliseconds, clamped
// to [Base, MaxCost]. features and vertices are estimates
// (internal/density): expected values, not counts.
func (w Weights) Read(features, vertices, msPerToken float64) float64 {
	return w.clamp(w.Work.MS(features, vertices) / msPerToken)
}

// WorkModel is the database time of a query, in milliseconds, from what it
// reads: QueryMS for the query itself, FeatureMS per feature it reads and
// VertexMS per vertex of those features. `geotoll calibrate` fits it to a
// database's own timings.
type WorkModel struct {
	QueryMS   float64 `yaml:"query_ms"`
	FeatureMS float64 `yaml:"feature_ms"`
	VertexMS  float64 `yaml:"vertex_ms"`
}

// MS is the time the model predicts for features and vertices: a negative
// size counts as zero, a NaN one as infinitely large (erring high).
func (m WorkModel) MS(features, vertices float64) float64 {
	return m.QueryMS + term(features, m.FeatureMS) + term(vertices, m.VertexMS)
}

// Contains prices the fences containing one point, up to limit of them:
// a one-point check plus limit × FeatureWeight (like Radius and BBox, the
// features the answer may carry), clamped.
func (w Weights) Contains(limit int) float64 {
	return w.clamp(w.Base + w.PointWeight + term(float64(limit), w.FeatureWeight))
}

// clamp bounds a price to [Base, MaxCost]; NaN becomes MaxCost.
func (w Weights) clamp(v float64) float64 {
	if !(v <= w.MaxCost) {
		v = w.MaxCost
	}
	if v < w.Base {
		v = w.Base
	}
	return v
}

// term is x × weight for a size x: never NaN, never negative. A zero weight
// ignores x entirely (0 × Inf would be NaN); an unmeasurable x (NaN) is the
// worst case; a negative x counts as 0.
func term(x, weight float64) float64 {
	switch {
	case weight == 0:
		return 0
	case x != x:
		return math.Inf(1)
	case x < 0:
		return 0
	}
	return x * weight
}

// area is a bound's area in square degrees, whatever its orientation.
func area(b orb.Bound) float64 {
	return math.Abs(b.Max[0]-b.Min[0]) * math.Abs(b.Max[1]-b.Min[1])
}
