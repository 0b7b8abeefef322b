package opendata

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestReadCountries(t *testing.T) {
	f, err := os.Open("testdata/countries.geo.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	err = ReadCountries(f, func(c Country) error {
		if !strings.Contains(string(c.Geometry), `"coordinates"`) {
			t.Errorf("%s: geometry %s", c.A3, c.Geometry)
		}
		got = append(got, c.A3)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "AAA,BOW,MUL" {
		t.Errorf("got %v", got)
	}
}

func TestReadCountriesErrors(t *testing.T) {
	stop := errors.New("stop")
	for _, tc := range []struct{ name, in, want string }{
		{"not an object", `[]`, "want {"},
		{"truncated", `{"type":"FeatureCollection","features":[`, "EOF"},
		{"feature without geometry", `{"features":[{"type":"Feature","properties":{"A3":"X"},"geometry":null}]}`, "not a Feature"},
		{"callback error", `{"features":[{"type":"Feature","properties":{"A3":"X"},"geometry":{"type":"Point","coordinates":[0,0]}}]}`, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ReadCountries(strings.NewReader(tc.in), func(Country) error { return stop })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
