package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// calibrate fits the demo's layers, writes the weights file named in the
// config, and a server built from that config prices with what it wrote.
func TestCalibrateWritesWhatServeReads(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	cfg.Throttle.WeightsFile = filepath.Join(t.TempDir(), "weights.yaml")
	// A file of an earlier run: its model of districts, which this run
	// does not fit, is kept; its model of places is replaced; its models
	// of roads and parks, layers the config no longer has, are dropped
	// (serve refuses a file that names a layer it does not serve).
	before := "tiles:\n  districts: {query_ms: 7, feature_ms: 0, vertex_ms: 0}\n  places: {query_ms: 99, feature_ms: 0, vertex_ms: 0}\n" +
		"  roads: {query_ms: 5, feature_ms: 0, vertex_ms: 0}\ngeofence:\n  parks: {query_ms: 5, feature_ms: 0, vertex_ms: 0}\n"
	if err := os.WriteFile(cfg.Throttle.WeightsFile, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := runCalibrateArgs(t.Context(), cfg, []string{"-layers", "places", "-per-zoom", "4", "-minzoom", "8", "-maxzoom", "14",
		"-queries", "10", "-runs", "1"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	raw, err := os.ReadFile(cfg.Throttle.WeightsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tiles:", "  places:", "geofence:", "fences:", "containment:", "query_ms:", "Held-out Spearman"} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("the weights file lacks %q:\n%s", want, raw)
		}
	}
	for _, want := range []string{"tiles/places", "geofence/places", "geofence/districts", "fences", "containment/districts", "ρ price"} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("the report lacks %q:\n%s", want, stderr.String())
		}
	}
	for _, want := range []string{`tile layer "roads"`, `geofence layer "parks"`} {
		if !strings.Contains(stderr.String(), want) || strings.Contains(string(raw), strings.Split(want, `"`)[1]) {
			t.Fatalf("the model of %s, no longer configured, is kept or its drop not reported:\n%s\n%s", want, raw, stderr.String())
		}
	}
	file, err := cfg.weightsFile()
	if err != nil {
		t.Fatal(err)
	}
	gate, err := cfg.toll()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gate.LayerWeights["places"].Work, file.Tiles["places"]; got != want {
		t.Fatalf("serve prices places with %+v, calibrate wrote %+v", got, want)
	}
	if got := gate.LayerWeights["districts"].Work; got != (throttle.WorkModel{QueryMS: 7}) {
		t.Fatalf("districts, not calibrated in this run, priced with %+v, want the file's model before it, query_ms 7", got)
	}
	if file.Tiles["places"].QueryMS == 99 {
		t.Fatal("the model of places, fitted in this run, is the file's before it")
	}
	if got, want := gate.GeofenceWork["districts"], file.Geofence["districts"]; got != want || got.QueryMS+got.FeatureMS+got.VertexMS == 0 {
		t.Fatalf("serve prices districts queries with %+v, calibrate wrote %+v", got, want)
	}
	if got, want := gate.ContainmentWork["districts"], file.Containment["districts"]; got != want || got.QueryMS+got.FeatureMS+got.VertexMS == 0 {
		t.Fatalf("serve prices contains and check on districts with %+v, calibrate wrote %+v", got, want)
	}
	if _, ok := file.Containment["places"]; ok {
		t.Fatal("a containment model of places, a layer of points, which contains and check refuse")
	}
	if gate.FenceWork != *file.Fences {
		t.Fatalf("serve prices fences with %+v, calibrate wrote %+v", gate.FenceWork, *file.Fences)
	}
}

func TestCalibrateRefusesBadArguments(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.URL = "postgres://127.0.0.1:1/none"
	for _, args := range [][]string{
		{"-layers", "nope"},
		{"-minzoom", "9", "-maxzoom", "8"},
		{"-per-zoom", "0"},
		{"-maxzoom", "40"},
	} {
		var out bytes.Buffer
		if err := runCalibrateArgs(t.Context(), cfg, args, &out, &out); err == nil {
			t.Errorf("calibrate %v: accepted", args)
		}
	}
}

// A weights file must name only layers the config serves, and be a file
// calibrate could have written.
func TestWeightsFileIsChecked(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"unknown layer":        "tiles:\n  nope: {query_ms: 1}\n",
		"unknown fence":        "geofence:\n  nope: {query_ms: 1}\n",
		"unknown containment":  "containment:\n  nope: {query_ms: 1}\n",
		"negative containment": "containment:\n  districts: {query_ms: 1, vertex_ms: -1}\n",
		"negative":             "tiles:\n  places: {query_ms: -1}\n",
		"unknown key":          "tiles:\n  places: {query: 1}\n",
		"missing file":         "",
		"not a mapping?":       "tiles: [1, 2]\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Throttle.WeightsFile = filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
			if text != "" {
				if err := os.WriteFile(cfg.Throttle.WeightsFile, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := cfg.toll(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// runCalibrateArgs runs `geotoll calibrate` with its own flags args.
func runCalibrateArgs(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	var f calibrateFlags
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	return runCalibrate(ctx, cfg, f, stdout, stderr)
}
