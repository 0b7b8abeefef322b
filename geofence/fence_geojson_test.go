package geofence

import (
	"errors"
	"strings"
	"testing"

	"github.com/paulmach/orb/geojson"

	"github.com/geotoll/geotoll/problem"
)

// TestParseFenceStricterThanOrbGeoJSON is why fences are not decoded with
// orb/geojson: it accepts every body below — an altitude it drops, members
// and properties it keeps, rings that are no rings, positions off the
// globe, a geometry that is no area — and would leave each check to code
// of ours after it, which is ParseFence. ParseFence refuses each one with
// a problem naming what is wrong (and counts positions while it reads).
func TestParseFenceStricterThanOrbGeoJSON(t *testing.T) {
	feature := func(geom, props string) string {
		return `{"type":"Feature","geometry":` + geom + `,"properties":` + props + `}`
	}
	for _, tc := range []struct {
		name, body string
		code       problem.Code
	}{
		{"altitude", feature(`{"type":"Polygon","coordinates":[[[0,0,5],[1,0,5],[1,1,5],[0,0,5]]]}`, `{"name":"x"}`), problem.OutOfRange},
		{"unknown member", `{"type":"Feature","style":"red","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]},"properties":{"name":"x"}}`, problem.Invalid},
		{"unknown property", feature(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}`, `{"name":"x","colour":"red"}`), problem.Invalid},
		{"no name", feature(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}`, `{}`), problem.Invalid},
		{"open ring", feature(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`, `{"name":"x"}`), problem.OutOfRange},
		{"ring of three", feature(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]}`, `{"name":"x"}`), problem.OutOfRange},
		{"off the globe", feature(`{"type":"Polygon","coordinates":[[[0,0],[181,0],[1,1],[0,0]]]}`, `{"name":"x"}`), problem.OutOfRange},
		{"a point", feature(`{"type":"Point","coordinates":[0,0]}`, `{"name":"x"}`), problem.OutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := geojson.UnmarshalFeature([]byte(tc.body)); err != nil {
				t.Fatalf("orb/geojson refuses it too (%v): the case shows nothing", err)
			}
			_, err := ParseFence(strings.NewReader(tc.body), 100)
			var pe *problem.Error
			if !errors.As(err, &pe) || pe.Code != tc.code {
				t.Fatalf("ParseFence: %v, want a %s problem", err, tc.code)
			}
		})
	}
}
