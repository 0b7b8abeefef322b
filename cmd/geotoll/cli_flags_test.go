package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagsAreCheckedBeforeConnecting: a wrong command line is a usage
// error (exit 2) naming the flag, reported before anything connects to a
// database — here there is none to connect to. `seed -points -1` panicked
// after connecting; `keys revoke` without -name said "no database".
func TestFlagsAreCheckedBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"seed", "-points", "-1"}, "-points -1"},
		{[]string{"seed", "-fences", "-1"}, "-fences -1"},
		{[]string{"opendata", "-points", "-1"}, "points -1 must be within"},
		{[]string{"keys", "revoke"}, "keys revoke: -name is required"},
		{[]string{"keys", "create", "-tier", "free"}, "keys create: -name and -tier are required"},
	} {
		code, out, errOut := cliRun(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "no database") {
			t.Errorf("geotoll %s: exit %d, want 2 and %q:\n%s%s", strings.Join(tc.args, " "), code, tc.want, out, errOut)
		}
	}
	// A tier that is not configured is the configuration's answer, still
	// before connecting, and a wrong command line.
	code, out, errOut := cliRun(t, "keys", "create", "-name", "x", "-tier", "gold")
	if code != exitUsage || !strings.Contains(errOut, `-tier "gold" is not one of the configured key tiers`) {
		t.Errorf("keys create -tier gold: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestFlagsVersionBeforeACommand: `geotoll -version config check` ran the
// check; -version prints the version and exits 0, whatever follows.
func TestFlagsVersionBeforeACommand(t *testing.T) {
	code, out, errOut := cliRun(t, "-version", "config", "check", "-config", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != exitOK || out != "geotoll dev\n" || errOut != "" {
		t.Errorf("geotoll -version config check: exit %d, stdout %q, stderr %q; want 0 and the version alone", code, out, errOut)
	}
}

// TestFlagsUsageErrorsExit2: a flag out of its bounds is a wrong command
// line, exit 2, as an unknown flag is, and the error names the flag
// (loadtest crawl -rate 0 printed a summary of its options instead;
// loadtest -profile bogus exited 1 after its start, and a -layer holding
// a path's text was sent as part of every request's path).
func TestFlagsUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"prepare", "-every", "500ms"}, "prepare: -every 500ms must be 0 (once) or at least 1s"},
		{[]string{"prepare", "-retain", "1s"}, "prepare: -retain 1s"},
		{[]string{"loadtest", "-rate", "0"}, "loadtest: -rate 0 must be within 1..5000"},
		{[]string{"loadtest", "-duration", "0s"}, "loadtest: -duration 0s must be within"},
		{[]string{"loadtest", "-profile", "bogus"}, `unknown profile "bogus"`},
		{[]string{"loadtest", "-layer", "places/0/0/0.mvt?x="}, `layer "places/0/0/0.mvt?x=" is not a layer's name`},
		{[]string{"loadtest", "-layer", "%zz"}, `layer "%zz" is not a layer's name`},
		{[]string{"loadtest", "crawl", "-crawl-layer", "a b"}, `loadtest crawl: -crawl-profile, -crawl-layer: layer "a b" is not`},
		{[]string{"loadtest", "crawl", "-rate", "0"}, "loadtest crawl: -rate 0 must be within 1..5000"},
		{[]string{"loadtest", "crawl", "-crawlers", "0"}, "loadtest crawl: -crawlers 0 must be within 1..250"},
		{[]string{"loadtest", "crawl", "-duration", "10ms"}, "-duration 10ms"},
		{[]string{"loadtest", "fidelity", "-db-time", "bogus"}, `loadtest fidelity: -db-time "bogus" must be sql or server`},
		{[]string{"loadtest", "zooms", "-per-zoom", "0"}, "loadtest zooms: -per-zoom 0"},
		// 0 was read as the default: 240,000 points and 300 fences, a
		// million open points, a tolerance of 0.01°.
		{[]string{"seed", "-points", "0"}, "seed: -points 0 and -fences 300 must be at least 1"},
		{[]string{"seed", "-fences", "0"}, "seed: -points 240000 and -fences 0 must be at least 1"},
		{[]string{"opendata", "-points", "0"}, "opendata: -points 0 must be at least 1"},
		{[]string{"opendata", "-simplify", "0"}, "opendata: -simplify 0"},
		{[]string{"opendata", "-seed", "0"}, "opendata: -seed 0 must be at least 1"},
		{[]string{"opendata", "-schema", ""}, "opendata: -schema and -reader must not be empty"},
		{[]string{"opendata", "-reader", ""}, "opendata: -schema and -reader must not be empty"},
		{[]string{"calibrate", "-layers", "nosuch"}, `calibrate: -layers: unknown layer "nosuch"`},
	} {
		code, out, errOut := cliRun(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("geotoll %s: exit %d, want 2 and %q:\n%s%s", strings.Join(tc.args, " "), code, tc.want, out, errOut)
		}
	}
}

// TestFlagsOutputFileCheckedFirst: calibrate -out and loadtest fidelity
// -json into a directory that does not exist failed only after the whole
// run, without naming the flag.
func TestFlagsOutputFileCheckedFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"calibrate", "-out", filepath.Join(missing, "w.yaml")}, "calibrate: -out: cannot write " + missing},
		{[]string{"loadtest", "fidelity", "-json", filepath.Join(missing, "x.json")}, "loadtest fidelity: -json: cannot write " + missing},
	} {
		code, out, errOut := cliRun(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "does not exist") {
			t.Errorf("geotoll %s: exit %d, want 2 and %q:\n%s%s", strings.Join(tc.args, " "), code, tc.want, out, errOut)
		}
	}
	// A path that can be written goes on to what the command needs next.
	code, _, errOut := cliRun(t, "calibrate", "-out", filepath.Join(t.TempDir(), "w.yaml"))
	if code != exitError || strings.Contains(errOut, "-out") || !strings.Contains(errOut, "DATABASE_URL") {
		t.Errorf("calibrate -out into a directory: exit %d, want 1 for want of a database:\n%s", code, errOut)
	}
}
