package main

import (
	"strings"
	"testing"
)

// prepare -layer naming a layer the configuration does not have is a
// wrong command line, exit 2 as the other flag errors, found before
// connecting when the configuration's layers are all there are
// (tiles.discover off); it exited 1 once connected. Here there is no
// database: a layer it has gets as far as connecting.
func TestPrepareUnknownLayerIsAUsageError(t *testing.T) {
	for _, list := range []string{"nosuch", "districts,nosuch"} {
		code, out, errOut := cliRun(t, "prepare", "-layer", list)
		if code != exitUsage || !strings.Contains(errOut, `prepare: -layer: no layer "nosuch" is configured`) || strings.Contains(errOut, "no database") {
			t.Errorf("prepare -layer %s: exit %d, want 2 naming the layer, before connecting:\n%s%s", list, code, out, errOut)
		}
	}
	if code, _, errOut := cliRun(t, "prepare", "-layer", "districts"); code != exitError || !strings.Contains(errOut, "database") {
		t.Errorf("prepare -layer districts without a database: exit %d, %s; want 1, failing to connect", code, errOut)
	}
}
