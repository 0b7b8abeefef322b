package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// cliRun runs a command line as the binary does and returns its exit
// status and output. Configuration variables of the caller's environment
// are cleared first (t.Setenv: these tests do not run in parallel).
func cliRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	clearConfigEnv(t)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestCLI is the command line's table: every command with a configuration
// flag before and after its name (-log-level with a bad value: only a
// flag that is read can fail the command), -h and help exit 0 without a
// database, unknown flags and commands are refused with status 2.
func TestCLI(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("listen: 127.0.0.1:0\ntiers_are_not_here: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte("throttle: {tiers: {free: {shadow: true}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type row struct {
		args []string
		code int
		want string // in stdout or stderr
	}
	var rows []row
	for _, cmd := range [][]string{{"serve"}, {"migrate"}, {"seed"}, {"keys", "list"}, {"keys", "create"}, {"keys", "revoke"},
		{"loadtest"}, {"loadtest", "fidelity"}, {"loadtest", "zooms"}, {"loadtest", "ceiling"}, {"loadtest", "crawl"}, {"calibrate"}, {"opendata"}, {"config", "check"}} {
		rows = append(rows,
			row{append([]string{"-log-level", "loud"}, cmd...), exitError, `log_level "loud"`},
			row{append(append([]string{}, cmd...), "-log-level", "loud"), exitError, `log_level "loud"`},
			row{append(append([]string{}, cmd...), "-h"), exitOK, "USAGE\n  geotoll "},
			row{append(append([]string{}, cmd...), "-no-such-flag"), exitUsage, "flag provided but not defined: -no-such-flag"},
			row{append([]string{"help"}, cmd...), exitOK, "CONFIGURATION"},
		)
	}
	// A command that takes no arguments refuses one, whatever it is, before
	// it does anything (crawl's flags keep it off any real server if not).
	for _, cmd := range []string{"serve", "migrate", "seed", "prepare", "keys list", "keys create", "keys revoke",
		"loadtest fidelity", "loadtest zooms", "loadtest ceiling", "loadtest crawl", "calibrate", "opendata",
		"config check", "config example", "config doc", "version"} {
		args := strings.Fields(cmd)
		if cmd == "loadtest crawl" {
			args = append(args, "-url", "http://127.0.0.1:9", "-duration", "1s")
		}
		rows = append(rows, row{append(args, "extra"), exitUsage, cmd + ` takes no arguments (got ["extra"])`})
	}
	rows = append(rows,
		row{[]string{"-h"}, exitOK, "COMMANDS"},
		row{[]string{"--help"}, exitOK, "COMMANDS"},
		row{[]string{"help"}, exitOK, "COMMANDS"},
		row{[]string{}, exitUsage, "no command"},
		row{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		row{[]string{"keys"}, exitUsage, "keys: no command"},
		row{[]string{"keys", "rotate"}, exitUsage, `keys: unknown command "rotate"`},
		row{[]string{"-no-such-flag", "serve"}, exitUsage, "flag provided but not defined"},
		row{[]string{"--version"}, exitOK, "geotoll dev"},
		row{[]string{"version"}, exitOK, "geotoll dev"},
		row{[]string{"-config", ok, "config", "check"}, exitOK, ok + ": ok"},
		row{[]string{"config", "check", "-config", ok}, exitOK, ok + ": ok"},
		row{[]string{"config", "check", "-config", good}, exitError, "tiers_are_not_here"},
		row{[]string{"config", "check", "-config", filepath.Join(dir, "missing.yaml")}, exitError, "no such file"},
		row{[]string{"config", "check", "-redis-timeout", "soon"}, exitUsage, `redis.timeout: "soon" is not a duration`},
		row{[]string{"config", "check", "-redis-timeout", "2s"}, exitOK, "the defaults with flag -redis-timeout: ok"},
		row{[]string{"keys", "create", "-name", "x", "-tier", "free", "-database-admin-url", "postgres://127.0.0.1:9/none?connect_timeout=1"}, exitError, "127.0.0.1"},
		row{[]string{"-admin-database-url", "postgres://127.0.0.1:9/none?connect_timeout=1", "keys", "list"}, exitError, "127.0.0.1"},
	)
	for _, r := range rows {
		t.Run(strings.Join(r.args, " "), func(t *testing.T) {
			code, out, errOut := cliRun(t, r.args...)
			if code != r.code || !strings.Contains(out+errOut, r.want) {
				t.Fatalf("geotoll %s: exit %d, want %d and %q in the output:\n%s%s", strings.Join(r.args, " "), code, r.code, r.want, out, errOut)
			}
			if r.code == exitOK && strings.Count(out+errOut, "USAGE\n") > 1 {
				t.Errorf("usage printed more than once:\n%s%s", out, errOut)
			}
		})
	}
}

// TestCLIServeFlags: `serve -listen X` serves on X, whether the flag
// stands before or after the command, and GEOTOLL_LISTEN does too.
func TestCLIServeFlags(t *testing.T) {
	db := testenv.ReadDatabaseURL(t)
	for _, place := range []string{"before", "after", "env"} {
		t.Run(place, func(t *testing.T) {
			addr := freeAddr(t)
			args := []string{"-listen", addr, "-database-url", db, "serve"}
			switch place {
			case "after":
				args = []string{"serve", "-listen", addr, "-database-url", db}
			case "env":
				args = []string{"serve"}
			}
			clearConfigEnv(t)
			if place == "env" {
				t.Setenv("GEOTOLL_LISTEN", addr)
				t.Setenv("GEOTOLL_DATABASE_URL", db)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() { done <- run(ctx, args, io.Discard, io.Discard) }()
			deadline := time.Now().Add(20 * time.Second)
			for {
				resp, err := http.Get("http://" + addr + "/healthz")
				if err == nil {
					resp.Body.Close()
					break
				}
				if time.Now().After(deadline) {
					cancel()
					t.Fatalf("nothing serves on %s (flags %s)", addr, place)
				}
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			select {
			case code := <-done:
				if code != exitOK {
					t.Fatalf("serve exited %d", code)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not stop")
			}
		})
	}
}

// TestConfigCheckNamesWhatItChecked: config check under environment
// variables names them; it said "the defaults: ok" of a configuration
// they had changed.
func TestConfigCheckNamesWhatItChecked(t *testing.T) {
	clearConfigEnv(t)
	t.Setenv("GEOTOLL_LISTEN", "127.0.0.1:9")
	t.Setenv("DATABASE_URL", "postgres://127.0.0.1:9/none")
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"config", "check", "-redis-timeout", "2s"}, &out, &errOut)
	want := "the defaults with DATABASE_URL, GEOTOLL_LISTEN, flag -redis-timeout: ok"
	if code != exitOK || !strings.HasPrefix(out.String(), want) {
		t.Fatalf("config check: exit %d, %q%s; want %q", code, out.String(), errOut.String(), want)
	}
}

// clearConfigEnv clears the variables that configure geotoll in the
// test's environment (make test exports some: GEOTOLL_ADMIN_DATABASE_URL,
// GEOTOLL_REDIS_URL…). Tests that call it do not run in parallel.
func clearConfigEnv(t *testing.T) {
	t.Helper()
	vars := []string{"GEOTOLL_CONFIG", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}
	for _, a := range envAliases {
		vars = append(vars, a.env)
	}
	for _, s := range newOverrides().settings {
		vars = append(vars, s.Env, s.Env+"_FILE")
	}
	for _, v := range vars {
		t.Setenv(v, "")
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A SIGINT or SIGTERM during serve's start-up (its context ended) stops it
// without serving, exit 0, and without warnings that lay at the
// database's door what the signal did: the process started on, logged
// "API keys not loaded yet", "layers not checked: the database does not
// answer" and "run geotoll prepare", then "serving", then shut down.
func TestServeStoppedDuringStartUp(t *testing.T) {
	clearConfigEnv(t)
	t.Setenv("GEOTOLL_DATABASE_URL", testenv.ReadDatabaseURL(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal, as main turns it into the context's end
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-log-format", "text"}, &out, &errOut)
	logs := errOut.String()
	if code != exitOK || !strings.Contains(logs, "stopped by a signal during start-up") {
		t.Errorf("exit %d, want 0 and the stop logged:\n%s", code, logs)
	}
	for _, blame := range []string{"msg=serving", "does not answer", "API keys not loaded", "has no overviews", "registry not read", "context canceled"} {
		if strings.Contains(logs, blame) {
			t.Errorf("the log says %q:\n%s", blame, logs)
		}
	}
}
