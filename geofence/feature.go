package geofence

import "encoding/json"

// Feature is one GeoJSON feature as PostGIS rendered it: the geometry from
// ST_AsGeoJSON and the properties from jsonb, passed through untouched.
type Feature struct {
	ID         int64
	Geometry   json.RawMessage
	Properties json.RawMessage
	// Revision is a fence's: the number of the write that last changed it
	// (its ETag, quoted; its properties carry it too). Zero for the
	// features of a layer.
	Revision int64
}

// MarshalJSON writes the feature as a GeoJSON Feature object.
func (f Feature) MarshalJSON() ([]byte, error) {
	props := f.Properties
	if len(props) == 0 {
		props = json.RawMessage("{}")
	}
	geom := f.Geometry
	if len(geom) == 0 {
		geom = json.RawMessage("null")
	}
	return json.Marshal(struct {
		Type       string          `json:"type"`
		ID         int64           `json:"id"`
		Geometry   json.RawMessage `json:"geometry"`
		Properties json.RawMessage `json:"properties"`
	}{"Feature", f.ID, geom, props})
}
