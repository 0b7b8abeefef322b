package toll

import (
	"cmp"
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
	"github.com/paulmach/orb/maptile"
)

// Price is what one request costs and what it is for.
type Price struct {
	Cost  float64
	Route string // routeTile ("tile"), or a geofence.Kind: "within", "bbox", "contains", "check"
	Layer string // layer name(s), comma-separated for a composite (one query each); "" when none
	Zoom  int    // tile zoom, -1 when not a tile
	// CacheHit: served without database work, so the global database
	// budget is not spent and nothing is settled.
	CacheHit bool
	// Base is the least the request may settle at (its base price); 0
	// means the default weights' Base.
	Base float64
}

// routeTile is the Route of a tile price.
const routeTile = "tile"

// TilePrice is the price of a tile demand: the sum of its layers' prices —
// a composite runs one query per layer — or, for a cache hit, the base
// price. A layer's price is the database time its query will take
// (Weights.Read of the Estimator's estimate: the features and vertices in the tile's envelope and
// buffer, on the relation its zoom reads), or, while there is no estimate,
// the tile's area (Weights.Tile), at least the model's price of an empty
// tile (its one query). A composite dearer than the caller's
// bucket can hold is refused with 422 by Charge (ask for fewer layers).
func (t *Toll) TilePrice(d tiles.Demand) float64 {
	if d.CacheHit { // served from the tile cache: the database does no work
		return t.tileBase(d)
	}
	var sum float64
	for _, l := range d.Layers {
		sum += t.layerPrice(l, d.Tile)
	}
	return sum
}

// tileBase is the least a tile demand costs: the largest base of its
// layers.
func (t *Toll) tileBase(d tiles.Demand) float64 {
	var base float64
	for _, l := range d.Layers {
		base = max(base, t.tileWeights(l.Name).Base)
	}
	return base
}

func (t *Toll) layerPrice(l *tiles.Layer, tile maptile.Tile) float64 {
	w := t.tileWeights(l.Name)
	if t.Estimator != nil {
		if est, ok := t.Estimator.Tile(l, tile); ok {
			return w.Read(est.Features, est.Vertices, t.msPerToken())
		}
	}
	// By its size: never below the one query the tile runs, as the model
	// prices an empty tile.
	return max(w.Tile(tile), w.Read(0, 0, t.msPerToken()))
}

// AdmitTile implements tiles.Gate.
func (t *Toll) AdmitTile(w http.ResponseWriter, r *http.Request, d tiles.Demand) bool {
	names := make([]string, len(d.Layers))
	for i, l := range d.Layers {
		names[i] = l.Name
	}
	return t.Charge(w, r, Price{Cost: t.TilePrice(d), Route: routeTile, Layer: strings.Join(names, ","), Zoom: int(d.Tile.Z),
		CacheHit: d.CacheHit, Base: t.tileBase(d)}) != nil
}

// GeofencePrice is the price of a geofence demand, a pure function of its
// validated parameters. With an estimate of what it reads (Estimator), it
// is the database time the work model predicts, in tokens: within and
// bbox with their layer's GeofenceWork (the features in the circle or
// box), contains and check with FenceWork (each point's index probe and
// the fences whose box holds it; a batch check sums its points) or, on a
// layer, with that layer's ContainmentWork (its features whose box holds
// each point; FenceWork while it has none).
// Without one, its size prices it. Either way a geofence demand takes the
// Default weights (their Base, MaxCost and size weights; the work model
// is the geofence one above): geofence layers have no weights of their
// own, and LayerWeights are tile layers', even where a geofence layer has
// a tile layer's name:
//
//	within    Weights.Radius(radius_m, limit)
//	bbox      Weights.BBox(bound, limit); a box across the antimeridian
//	          arrives unwrapped, so its area is the sum of its two parts
//	check     Weights.Batch(points)
//	contains  Weights.Contains(limit): a check of one point (so a thousand
//	          contains calls never cost less than one batch of a thousand)
//	          plus the fences its answer may carry
//
// An unknown kind is priced at MaxCost: erring high is the safe side.
func (t *Toll) GeofencePrice(d geofence.Demand) float64 {
	w := t.Default
	if t.Estimator != nil {
		if est, ok := t.Estimator.Geofence(d); ok {
			switch d.Kind {
			case geofence.KindWithin, geofence.KindBBox:
				w.Work = t.geofenceWork(d.Layer)
			default:
				w.Work = t.containmentWork(d.Layer)
			}
			return w.Read(est.Features, est.Vertices, t.msPerToken())
		}
	}
	switch d.Kind {
	case geofence.KindWithin:
		return w.Radius(d.RadiusM, d.Limit)
	case geofence.KindBBox:
		return w.BBox(d.Bound, d.Limit)
	case geofence.KindCheck:
		return w.Batch(d.Points)
	case geofence.KindContains:
		return w.Contains(d.Limit)
	}
	return w.MaxCost
}

// geofenceWork is the work model of within and bbox on a layer.
func (t *Toll) geofenceWork(layer string) throttle.WorkModel {
	if m, ok := t.GeofenceWork[layer]; ok {
		return m
	}
	return DefaultGeofenceWork
}

// containmentWork is the work model of contains and check on a layer (""
// the fences).
func (t *Toll) containmentWork(layer string) throttle.WorkModel {
	if m, ok := t.ContainmentWork[layer]; ok && layer != "" {
		return m
	}
	return cmp.Or(t.FenceWork, DefaultFenceWork)
}

// AdmitGeofence implements geofence.Gate.
func (t *Toll) AdmitGeofence(w http.ResponseWriter, r *http.Request, d geofence.Demand) bool {
	return t.Charge(w, r, Price{Cost: t.GeofencePrice(d), Route: string(d.Kind), Layer: d.Layer, Zoom: -1, Base: t.Default.Base}) != nil
}

// Authenticate implements geofence.Authenticator: a request presenting an
// unknown or revoked key is refused as Charge refuses it (401, one token
// of the address's failed-auth bucket; 429 once that is dry), and one
// whose key names a tier that is not configured (403, nothing charged),
// before its body is read. Any other request passes, to be charged once
// priced.
func (t *Toll) Authenticate(w http.ResponseWriter, r *http.Request, kind geofence.Kind) bool {
	if keyRepeated(w, r, true) {
		return false
	}
	if _, present := APIKey(r); !present {
		return true
	}
	caller, ok := t.identify(r)
	if !ok {
		t.refuseKey(w, r, caller, Price{Route: string(kind), Zoom: -1}, unknownKey)
		return false
	}
	_, known := t.tier(w, r, caller)
	return known
}

var (
	_ tiles.Gate             = (*Toll)(nil)
	_ geofence.Gate          = (*Toll)(nil)
	_ geofence.Authenticator = (*Toll)(nil)
	_ geofence.AdminRefuser  = (*Toll)(nil)
)
