package calibrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/geotoll/geotoll/throttle"
)

// File is the weights file: the work models `geotoll calibrate` fitted, in
// milliseconds of database time, which `serve` with the same config reads
// (throttle.weights_file). A model here replaces the default of its layer;
// a layer's own weights in the config still win.
type File struct {
	Tiles    map[string]throttle.WorkModel `yaml:"tiles,omitempty"`    // by tile layer
	Geofence map[string]throttle.WorkModel `yaml:"geofence,omitempty"` // within and bbox, by geofence layer
	Fences   *throttle.WorkModel           `yaml:"fences,omitempty"`   // contains and check on the fences
	// Containment: contains and check on a polygon layer (?layer=), by
	// geofence layer.
	Containment map[string]throttle.WorkModel `yaml:"containment,omitempty"`
}

// File returns the fitted groups as a weights file.
func (rep Report) File() File {
	var f File
	for name, m := range rep.Work() {
		switch {
		case name == "fences":
			f.Fences = &m
		case strings.HasPrefix(name, "tiles/"):
			if f.Tiles == nil {
				f.Tiles = map[string]throttle.WorkModel{}
			}
			f.Tiles[strings.TrimPrefix(name, "tiles/")] = m
		case strings.HasPrefix(name, "geofence/"):
			if f.Geofence == nil {
				f.Geofence = map[string]throttle.WorkModel{}
			}
			f.Geofence[strings.TrimPrefix(name, "geofence/")] = m
		case strings.HasPrefix(name, "containment/"):
			if f.Containment == nil {
				f.Containment = map[string]throttle.WorkModel{}
			}
			f.Containment[strings.TrimPrefix(name, "containment/")] = m
		}
	}
	return f
}

// Merge is f with the models of newer in place of its own: a run that
// fitted some layers replaces theirs and keeps the others'.
func (f File) Merge(newer File) File {
	out := File{Fences: f.Fences}
	if newer.Fences != nil {
		out.Fences = newer.Fences
	}
	merge := func(old, nw map[string]throttle.WorkModel) map[string]throttle.WorkModel {
		if len(old)+len(nw) == 0 {
			return nil
		}
		m := make(map[string]throttle.WorkModel, len(old)+len(nw))
		for k, v := range old {
			m[k] = v
		}
		for k, v := range nw {
			m[k] = v
		}
		return m
	}
	out.Tiles = merge(f.Tiles, newer.Tiles)
	out.Geofence = merge(f.Geofence, newer.Geofence)
	out.Containment = merge(f.Containment, newer.Containment)
	return out
}

// Within is f without the models of the layers that are no longer
// configured — tile reports whether a tile layer is, fence whether a
// geofence layer is — and what it dropped ("tile layer \"roads\""),
// sorted. A file written from a config is read by serve with that
// config, which refuses a model of a layer it does not serve (the file
// may be another config's); a run that keeps the models of what it did
// not fit must therefore not keep those of layers since removed, or the
// next start would fail on a file calibrate has just written.
func (f File) Within(tile, fence func(name string) bool) (File, []string) {
	var dropped []string
	keep := func(m map[string]throttle.WorkModel, configured func(string) bool, what string) map[string]throttle.WorkModel {
		var out map[string]throttle.WorkModel
		for _, name := range sortedKeys(m) {
			if !configured(name) {
				dropped = append(dropped, fmt.Sprintf("%s %q", what, name))
				continue
			}
			if out == nil {
				out = map[string]throttle.WorkModel{}
			}
			out[name] = m[name]
		}
		return out
	}
	out := File{Fences: f.Fences}
	out.Tiles = keep(f.Tiles, tile, "tile layer")
	out.Geofence = keep(f.Geofence, fence, "geofence layer")
	out.Containment = keep(f.Containment, fence, "contains and check on geofence layer")
	return out, dropped
}

// Write writes f as YAML after a comment of header lines.
func (f File) Write(w io.Writer, header []string) error {
	var buf bytes.Buffer
	for _, h := range header {
		fmt.Fprintf(&buf, "# %s\n", h)
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// ReadFile reads a weights file: unknown keys and negative or non-finite
// models are errors.
func ReadFile(path string) (File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return File{}, err
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return File{}, fmt.Errorf("weights file %s: %w", path, err)
	}
	var errs []error
	check := func(what string, m throttle.WorkModel) {
		w := throttle.Weights{Base: 1, MaxCost: 1, Work: m}
		if err := w.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for _, name := range sortedKeys(f.Tiles) {
		check("tiles."+name, f.Tiles[name])
	}
	for _, name := range sortedKeys(f.Geofence) {
		check("geofence."+name, f.Geofence[name])
	}
	if f.Fences != nil {
		check("fences", *f.Fences)
	}
	for _, name := range sortedKeys(f.Containment) {
		check("containment."+name, f.Containment[name])
	}
	if err := errors.Join(errs...); err != nil {
		return File{}, fmt.Errorf("weights file %s: %w", path, err)
	}
	return f, nil
}

func sortedKeys(m map[string]throttle.WorkModel) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
