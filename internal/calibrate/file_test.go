package calibrate

import (
	"reflect"
	"slices"
	"testing"

	"github.com/geotoll/geotoll/throttle"
)

// Within keeps the models of configured layers and the fences' model, and
// names what it drops.
func TestFileWithin(t *testing.T) {
	m := throttle.WorkModel{QueryMS: 1}
	f := File{
		Tiles:    map[string]throttle.WorkModel{"places": m, "roads": m},
		Geofence: map[string]throttle.WorkModel{"parks": m, "districts": m},
		Fences:   &m,
		// contains and check on a layer: kept and dropped as its layer is
		Containment: map[string]throttle.WorkModel{"parks": m, "districts": m},
	}
	configured := func(names ...string) func(string) bool {
		return func(n string) bool { return slices.Contains(names, n) }
	}
	got, dropped := f.Within(configured("places"), configured("districts"))
	want := File{Tiles: map[string]throttle.WorkModel{"places": m}, Geofence: map[string]throttle.WorkModel{"districts": m}, Fences: &m,
		Containment: map[string]throttle.WorkModel{"districts": m}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kept %+v, want %+v", got, want)
	}
	if want := []string{`tile layer "roads"`, `geofence layer "parks"`, `contains and check on geofence layer "parks"`}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %q, want %q", dropped, want)
	}
	got, dropped = f.Within(configured(), configured())
	if got.Tiles != nil || got.Geofence != nil || got.Containment != nil || got.Fences != &m || len(dropped) != 6 {
		t.Errorf("nothing configured: kept %+v, dropped %q", got, dropped)
	}
	if got, dropped := (File{}).Within(configured(), configured()); !reflect.DeepEqual(got, File{}) || dropped != nil {
		t.Errorf("empty file: %+v %q", got, dropped)
	}
}
