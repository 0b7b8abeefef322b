package web_test

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// TestPreviewScript runs app.test.mjs with node's test runner: app.js in a
// stub page (no browser, no server), answered what each case says — the
// budget meter reads the caller's own bucket from the RateLimit fields
// (not the in-flight cap's or the IPv6 network's on their refusals), the
// spent counter counts what the server charged and no refusal, and layers
// named constructor, toString or __proto__ are layers like the others.
//
// It needs node (Node.js 20 or later, as the browser test does): without
// it, it fails when services are required (make test, CI) and skips
// otherwise.
func TestPreviewScript(t *testing.T) {
	node := testenv.Tool(t, "node", "the preview script's tests (Node.js 20 or later)")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", "app.test.mjs")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("node --test app.test.mjs timed out:\n%s", out)
		}
		t.Fatalf("node --test app.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
