package opendata

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Country is one feature of a @geo-maps countries FeatureCollection: its
// ISO 3166-1 alpha-3 code and its GeoJSON geometry, as-is (Polygon or
// MultiPolygon, valid or not).
type Country struct {
	A3       string
	Geometry json.RawMessage
}

// ReadCountries streams the features of a GeoJSON FeatureCollection whose
// features carry an "A3" property, calling fn for each one in order. It
// never holds more than one feature in memory.
func ReadCountries(r io.Reader, fn func(Country) error) error {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("countries: %w", err)
		}
		if tok != "features" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return fmt.Errorf("countries: %v: %w", tok, err)
			}
			continue
		}
		if err := expectDelim(dec, '['); err != nil {
			return err
		}
		for i := 0; dec.More(); i++ {
			var f struct {
				Type       string          `json:"type"`
				Properties map[string]any  `json:"properties"`
				Geometry   json.RawMessage `json:"geometry"`
			}
			if err := dec.Decode(&f); err != nil {
				return fmt.Errorf("countries: feature %d: %w", i, err)
			}
			a3, _ := f.Properties["A3"].(string)
			if f.Type != "Feature" || len(f.Geometry) == 0 || string(f.Geometry) == "null" {
				return fmt.Errorf("countries: feature %d (%q) is not a Feature with a geometry", i, a3)
			}
			if err := fn(Country{A3: a3, Geometry: f.Geometry}); err != nil {
				return err
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("countries: %w", err)
	}
	if tok != want {
		return fmt.Errorf("countries: got %v, want %v", tok, want)
	}
	return nil
}
