package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// SIGHUP — a closed terminal's (make run), or a supervisor's reload —
// stops serve as SIGTERM does: the in-flight requests finish, the leases
// and settlements reach Redis, and the process exits 0. It had Go's
// default action: the process died at once (exit status 129) without a
// line in the log, and a caller's in-flight slot it held stayed taken in
// Redis until its TTL. The test binary runs as the geotoll binary
// (runAsMain), so that main's own signal handling is what is tested.
func TestServeStopsOnSIGHUP(t *testing.T) {
	cmd := exec.Command(os.Args[0], "serve", "-listen", "127.0.0.1:0", "-log-format", "text")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), runAsMain + "=1",
		"GEOTOLL_DATABASE_URL=" + testenv.ReadDatabaseURL(t), "GEOTOLL_REDIS_URL=" + testenv.RedisURL(t),
		"GEOTOLL_THROTTLE_PREFIX=" + testenv.Prefix(t)}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var logs strings.Builder
	wait := func(what string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("serve's log ended before %q:\n%s", what, logs.String())
				}
				logs.WriteString(l + "\n")
				if strings.Contains(l, what) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q within 30 s:\n%s", what, logs.String())
			}
		}
	}
	wait("msg=serving")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait("shutting down")
	for l := range lines {
		logs.WriteString(l + "\n")
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) || err != nil {
		t.Fatalf("serve after SIGHUP: %v, want exit status 0:\n%s", err, logs.String())
	}
}
