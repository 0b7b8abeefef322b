package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
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
	s := startServe(t, "")
	s.wait("msg=serving")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.wait("shutting down")
	if err := s.exit(); err != nil {
		t.Fatalf("serve after SIGHUP: %v, want exit status 0:\n%s", err, s.logs.String())
	}
}

// A serve started ignoring SIGHUP (nohup) keeps ignoring it: asking for
// SIGHUP undid the ignore, so the terminal closing stopped it.
func TestServeUnderNohupIgnoresSIGHUP(t *testing.T) {
	s := startServe(t, `trap "" HUP; exec "$0" "$@"`)
	_, addr, _ := strings.Cut(s.wait("msg=serving"), "addr=")
	addr, _, _ = strings.Cut(addr, " ")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // long enough for a shutdown to close the listener
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("serve under nohup after SIGHUP: %v, want it serving:\n%s", err, s.logs.String())
	}
	_ = resp.Body.Close()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.wait("shutting down")
	if err := s.exit(); err != nil {
		t.Fatalf("serve after SIGTERM: %v, want exit status 0:\n%s", err, s.logs.String())
	}
}

// served is a geotoll serve run as a process of its own: the test binary
// as the geotoll binary (runAsMain), so that main's own signal handling is
// what is tested, its log read line by line.
type served struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	logs  strings.Builder
}

// startServe starts serve; with shell, through sh -c shell (the binary
// and its arguments its $0 and $@).
func startServe(t *testing.T, shell string) *served {
	t.Helper()
	args := []string{"serve", "-listen", "127.0.0.1:0", "-log-format", "text"}
	cmd := exec.Command(os.Args[0], args...)
	if shell != "" {
		cmd = exec.Command("sh", append([]string{"-c", shell, os.Args[0]}, args...)...)
	}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), runAsMain + "=1",
		"GEOTOLL_DATABASE_URL=" + testenv.ReadDatabaseURL(t), "GEOTOLL_REDIS_URL=" + testenv.RedisURL(t),
		"GEOTOLL_THROTTLE_PREFIX=" + testenv.Prefix(t)}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The tests may run ignoring SIGHUP (under nohup, as CI may be
	// started): an ignored signal stays ignored across exec, a caught one
	// is reset to its default. Caught while the process starts, SIGHUP
	// comes to it at its default, whatever the tests' own disposition.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err = cmd.Start()
	signal.Stop(hup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	s := &served{t: t, cmd: cmd, lines: make(chan string, 256)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	return s
}

// wait reads the log until a line holds what, and returns that line.
func (s *served) wait(what string) string {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("serve's log ended before %q:\n%s", what, s.logs.String())
			}
			s.logs.WriteString(l + "\n")
			if strings.Contains(l, what) {
				return l
			}
		case <-deadline:
			s.t.Fatalf("no %q within 30 s:\n%s", what, s.logs.String())
		}
	}
}

// exit reads the rest of the log and waits for the process: nil when it
// exited 0.
func (s *served) exit() error {
	for l := range s.lines {
		s.logs.WriteString(l + "\n")
	}
	return s.cmd.Wait()
}
