package toll

import (
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/tiles"
)

// TilePrice is the price of a tile demand: the sum of its layers' prices —
// a composite runs one query per layer — or, for a cache hit, the base
// price. A composite dearer than the caller's bucket can hold is refused
// with 422 by Charge (ask for fewer layers).
func (t *Toll) TilePrice(d tiles.Demand) float64 {
	if d.CacheHit { // served from the tile cache: the database does no work
		var base float64
		for _, l := range d.Layers {
			base = max(base, t.weights(l.Name).Base)
		}
		return base
	}
	var sum float64
	for _, l := range d.Layers {
		sum += t.weights(l.Name).Tile(d.Tile)
	}
	return sum
}

// AdmitTile implements tiles.Gate.
func (t *Toll) AdmitTile(w http.ResponseWriter, r *http.Request, d tiles.Demand) bool {
	names := make([]string, len(d.Layers))
	for i, l := range d.Layers {
		names[i] = l.Name
	}
	var base float64
	for _, l := range d.Layers {
		base = max(base, t.weights(l.Name).Base)
	}
	return t.Charge(w, r, Price{Cost: t.TilePrice(d), Route: "tile", Layer: strings.Join(names, ","), Zoom: int(d.Tile.Z),
		CacheHit: d.CacheHit, Base: base}) != nil
}

// GeofencePrice is the price of a geofence demand, a pure function of its
// validated parameters. within and bbox use the weights of their layer (as
// tiles do: LayerWeights by layer name, else Default); contains and check,
// which search the fences, use Default:
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
	switch d.Kind {
	case geofence.KindWithin:
		return t.weights(d.Layer).Radius(d.RadiusM, d.Limit)
	case geofence.KindBBox:
		return t.weights(d.Layer).BBox(d.Bound, d.Limit)
	case geofence.KindCheck:
		return t.Default.Batch(d.Points)
	case geofence.KindContains:
		return t.Default.Contains(d.Limit)
	}
	return t.Default.MaxCost
}

// AdmitGeofence implements geofence.Gate.
func (t *Toll) AdmitGeofence(w http.ResponseWriter, r *http.Request, d geofence.Demand) bool {
	w8 := t.Default
	if d.Kind == geofence.KindWithin || d.Kind == geofence.KindBBox {
		w8 = t.weights(d.Layer)
	}
	return t.Charge(w, r, Price{Cost: t.GeofencePrice(d), Route: string(d.Kind), Layer: d.Layer, Zoom: -1, Base: w8.Base}) != nil
}

var (
	_ tiles.Gate            = (*Toll)(nil)
	_ geofence.Gate         = (*Toll)(nil)
	_ geofence.AdminRefuser = (*Toll)(nil)
)
