package geofence

import "context"

// WithinQuery asks for the features of Layer within Radius metres of
// (Lng, Lat), nearest first: at most Limit of them, and the nearest whose
// positions stay within MaxVertices in all (0: no such cap).
type WithinQuery struct {
	Layer       *Layer
	Lng, Lat    float64
	Radius      float64
	Limit       int
	MaxVertices int
}

// ContainsQuery asks for the fences that contain (Lng, Lat), in id order:
// at most Limit of them, with at most MaxVertices positions in all. With a
// Layer, it asks for that layer's features instead: at most Limit of them,
// their ids and properties without geometry.
type ContainsQuery struct {
	Layer       *Containment // nil: the fences
	Lng, Lat    float64
	Limit       int
	MaxVertices int
}

// CheckQuery asks, for each point in order, which fences (or, with a
// Layer, which of its features) contain it.
type CheckQuery struct {
	Layer  *Containment // nil: the fences
	Points []Point
}

// FencesQuery asks for a page of the fences after After, in id order: at
// most Limit of them, with at most MaxVertices positions in all — but for
// the page's first fence, which is answered however large it is, so that
// every fence can be listed.
type FencesQuery struct {
	After       int64
	Limit       int
	MaxVertices int
}

// BBoxQuery asks for the features of Layer that intersect Box, in id order:
// at most Limit of them, and the first whose positions stay within
// MaxVertices in all (0: no such cap).
type BBoxQuery struct {
	Layer       *Layer
	Box         BBox
	Limit       int
	MaxVertices int
}

// Reader runs the read queries; *Store is the production one. Handler tests
// substitute their own.
type Reader interface {
	// Within, BBox and Contains report truncated when features were left
	// out by q's caps of positions (and, for Contains, of fences).
	Within(ctx context.Context, q WithinQuery) (fs []Feature, truncated bool, err error)
	BBox(ctx context.Context, q BBoxQuery) (fs []Feature, truncated bool, err error)
	Contains(ctx context.Context, q ContainsQuery) (fs []Feature, truncated bool, err error)
	// Check returns, for each point in order, the ids of the fences (or
	// the layer's features) that contain it (never nil; empty when none),
	// from one query.
	Check(ctx context.Context, q CheckQuery) ([][]int64, error)
	// Fence and Fences answer fences with their Revision. Fences reports
	// cut when the page ended at q.MaxVertices before q.Limit fences, with
	// fences after it: the next page starts after its last fence.
	Fence(ctx context.Context, id int64) (Feature, error)
	Fences(ctx context.Context, q FencesQuery) (fs []Feature, cut bool, err error)
}

// Writer writes fences; *Store over the writer role is the production one.
// The fences it answers carry their Revision. ReplaceFence and DeleteFence
// write only when cond holds for the fence's current revision, checked in
// the write's own transaction (a 412 otherwise, nothing written): two
// writes with the same If-Match cannot both succeed.
type Writer interface {
	CreateFence(ctx context.Context, in FenceInput) (Feature, error)
	ReplaceFence(ctx context.Context, id int64, in FenceInput, cond Preconditions) (Feature, error)
	DeleteFence(ctx context.Context, id int64, cond Preconditions) error
}
