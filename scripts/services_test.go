// Package scripts_test checks scripts/services.sh as two checkouts sharing
// one state dir use it.
package scripts_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// checkout is a copy of the scripts in a directory of its own, as another
// clone or worktree of the repository would hold them.
type checkout struct {
	t   *testing.T
	dir string
	env []string
}

func newCheckout(t *testing.T, state string, redisPort int) checkout {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"services.sh", "apt.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "scripts", f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return checkout{t: t, dir: dir, env: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"GEOTOLL_STATE_DIR=" + state,
		"GEOTOLL_REDIS_PORT=" + strconv.Itoa(redisPort),
		"GEOTOLL_NO_DOCKER=1",
		// An external PostgreSQL: only Redis is started, which takes
		// milliseconds.
		"DATABASE_URL=postgres://nobody@127.0.0.1:1/none",
	}}
}

// run runs scripts/services.sh with args and returns what it logged.
func (c checkout) run(args ...string) string {
	c.t.Helper()
	cmd := exec.Command("bash", append([]string{"scripts/services.sh"}, args...)...)
	cmd.Dir, cmd.Env = c.dir, c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("services.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// twoCheckouts returns two checkouts sharing one state dir and Redis port;
// a Redis still running when the test ends is stopped.
func twoCheckouts(t *testing.T) (a, b checkout, port int) {
	t.Helper()
	needRedisServer(t)
	state := t.TempDir()
	port = testenv.FreePort(t)
	a, b = newCheckout(t, state, port), newCheckout(t, state, port)
	t.Cleanup(func() {
		if answers(port) {
			// b's copy: a's may be gone (TestDownStopsWhatARemovedCheckoutStarted).
			b.run("down", "--force")
		}
	})
	return a, b, port
}

func needRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if testenv.Required() {
			t.Fatal("redis-server is not installed; run `make services` (it installs it)")
		}
		t.Skip("redis-server is not installed")
	}
}

func answers(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// `down` stops what its own checkout started and leaves running what
// another checkout sharing the state dir started (and reused), unless
// told --force.
func TestDownStopsOnlyWhatThisCheckoutStarted(t *testing.T) {
	a, b, port := twoCheckouts(t)

	a.run("up")
	if !answers(port) {
		t.Fatal("Redis does not answer after up")
	}
	if out := b.run("up"); !strings.Contains(out, "already runs") {
		t.Errorf("the second checkout's up did not reuse Redis:\n%s", out)
	}
	if out := b.run("down"); !strings.Contains(out, "left running") || !answers(port) {
		t.Fatalf("the checkout that only reused Redis stopped it (answers: %v):\n%s", answers(port), out)
	}
	if out := a.run("down"); answers(port) {
		t.Fatalf("the checkout that started Redis did not stop it:\n%s", out)
	}

	b.run("up") // now b started it
	a.run("down")
	if !answers(port) {
		t.Fatal("a checkout stopped what another started")
	}
	a.run("down", "--force")
	if answers(port) {
		t.Fatal("down --force left Redis running")
	}
}

// A service whose starting checkout was removed is stopped by any other.
func TestDownStopsWhatARemovedCheckoutStarted(t *testing.T) {
	a, b, port := twoCheckouts(t)
	a.run("up")
	if err := os.RemoveAll(a.dir); err != nil {
		t.Fatal(err)
	}
	if out := b.run("down"); answers(port) || !strings.Contains(out, "no longer exists") {
		t.Fatalf("Redis of a removed checkout left running (answers: %v):\n%s", answers(port), out)
	}
}

// Two checkouts bringing the services up at once (make test beside make
// run) both succeed, one starting Redis and the other reusing it, and one
// stop leaves it running for the other: the commands that start or stop
// services take turns.
func TestUpAtOnceFromTwoCheckouts(t *testing.T) {
	for round := range 5 {
		a, b, port := twoCheckouts(t)
		outs := make([]string, 2)
		errs := make([]error, 2)
		done := make(chan int)
		for i, c := range []checkout{a, b} {
			go func() {
				cmd := exec.Command("bash", "scripts/services.sh", "up")
				cmd.Dir, cmd.Env = c.dir, c.env
				out, err := cmd.CombinedOutput()
				outs[i], errs[i] = string(out), err
				done <- i
			}()
		}
		<-done
		<-done
		for i := range 2 {
			if errs[i] != nil {
				t.Fatalf("round %d: checkout %d's up beside the other's: %v\n%s", round, i, errs[i], outs[i])
			}
		}
		if !answers(port) {
			t.Fatalf("round %d: Redis does not answer after both ups:\n%s\n%s", round, outs[0], outs[1])
		}
		if reused := strings.Count(outs[0]+outs[1], "already runs"); reused != 1 {
			t.Errorf("round %d: %d of the two ups reused Redis, want 1:\n%s\n%s", round, reused, outs[0], outs[1])
		}
		a.run("down", "--force")
	}
}

// The lock beside the state dir needs no more than the state dir did: a
// state dir whose parents do not exist yet is made, as before the lock.
func TestUpWithAStateDirNotYetMade(t *testing.T) {
	needRedisServer(t)
	state := filepath.Join(t.TempDir(), "not", "yet") + "/"
	port := testenv.FreePort(t)
	c := newCheckout(t, state, port)
	t.Cleanup(func() {
		if answers(port) {
			c.run("down", "--force")
		}
	})
	c.run("up")
	if !answers(port) {
		t.Fatal("Redis does not answer after up")
	}
}
