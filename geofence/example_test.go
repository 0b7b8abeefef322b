package geofence_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/problem"
)

// A box whose west edge is east of its east edge crosses the antimeridian:
// it is searched as two boxes and priced by their total area.
func ExampleParseBBox() {
	b, err := geofence.ParseBBox("175,-20,-175,-10", 100)
	if err != nil {
		panic(err)
	}
	fmt.Println(b.CrossesAntimeridian(), b.Area())
	for _, part := range b.Parts() {
		fmt.Println(part.Min, part.Max)
	}
	// Output:
	// true 100
	// [175 -20] [180 -10]
	// [-180 -20] [-175 -10]
}

// Numbers follow JSON's grammar: what strconv would also accept (NaN, Inf,
// hex floats, a leading '+') is a 400; a number out of range is a 422.
func ExampleParseLng() {
	for _, s := range []string{"13.4", "1e-7", "NaN", "0x1p3", "+13.4", "181"} {
		v, err := geofence.ParseLng("lng", s)
		if err != nil {
			fmt.Printf("%-6s %d\n", s, problem.Status(problem.From(err).Code))
			continue
		}
		fmt.Printf("%-6s %v\n", s, v)
	}
	// Output:
	// 13.4   13.4
	// 1e-7   1e-07
	// NaN    400
	// 0x1p3  400
	// +13.4  400
	// 181    422
}

func ExampleParseBatch() {
	pts, err := geofence.ParseBatch(strings.NewReader(`{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`), 1000)
	fmt.Println(pts, err)
	_, err = geofence.ParseBatch(strings.NewReader(`{"points":[{"id":"v1","lng":13.4,"lat":52.5,"lat":0}]}`), 1000)
	fmt.Println(err)
	// Output:
	// [{v1 13.4 52.5}] <nil>
	// invalid points[0].lat: points[0].lat is given twice
}

// If-Match and If-None-Match are "*" alone or a list of quoted entity tags
// (an empty one is a list of none); anything else is a 400, so that a
// condition the server cannot read never lets a write through.
func ExamplePreconditions() {
	for _, v := range []string{`"41"`, `W/"40", "41"`, `*`, ``, `41`, `*, "41"`, `"41`} {
		status := "ok"
		if _, err := geofence.ParsePreconditions(http.Header{"If-Match": {v}}); err != nil {
			status = fmt.Sprint(problem.Status(problem.From(err).Code))
		}
		fmt.Printf("If-Match: %s → %s\n", v, status)
	}
	// Output:
	// If-Match: "41" → ok
	// If-Match: W/"40", "41" → ok
	// If-Match: * → ok
	// If-Match:  → ok
	// If-Match: 41 → 400
	// If-Match: *, "41" → 400
	// If-Match: "41 → 400
}
