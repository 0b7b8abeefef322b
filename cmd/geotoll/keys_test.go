package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
)

// keys create refuses a name in use and says how to rotate it; once the
// key is revoked, the name is free again.
func TestKeysCreateNameInUse(t *testing.T) {
	t.Parallel()
	admin := testenv.DatabaseURL(t)
	name := strings.ReplaceAll(testenv.Prefix(t), "geotoll-test-", "rot")
	t.Cleanup(func() {
		_, _ = testenv.Pool(t).Exec(context.Background(), "DELETE FROM geotoll.api_keys WHERE name = $1", name)
	})
	keys := func(args ...string) (string, error) {
		return runCommand(t.Context(), append([]string{"-log-level", "warn", "-database-admin-url", admin, "keys"}, args...)...)
	}
	first, err := keys("create", "-name", name, "-tier", "free")
	if err != nil || !strings.HasPrefix(first, "gt_") {
		t.Fatalf("create: %q %v", first, err)
	}
	_, err = keys("create", "-name", name, "-tier", "free")
	if err == nil || !strings.Contains(err.Error(), `a key named "`+name+`" is active; to rotate it, revoke it first (geotoll keys revoke -name `+name) {
		t.Fatalf("create of a name in use: %v, want how to rotate it", err)
	}
	if _, err := keys("revoke", "-name", name); err != nil {
		t.Fatal(err)
	}
	second, err := keys("create", "-name", name, "-tier", "free")
	if err != nil || second == first {
		t.Fatalf("create after revoke: %q %v", second, err)
	}
}

// keys create checks -name's form and that -tier is a configured key
// tier before connecting: a wrong command line, exit 2, naming the flag
// (both were refused once connected, exit 1). Here there is no database.
func TestKeysCreateFlagsAreCheckedBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-name", "bad name", "-tier", "free"}, `keys create: -name "bad name" must be`},
		{[]string{"-name", strings.Repeat("n", 65), "-tier", "free"}, "keys create: -name"},
		{[]string{"-name", "x", "-tier", "nosuch"}, `keys create: -tier "nosuch" is not one of the configured key tiers`},
		{[]string{"-name", "x", "-tier", "anonymous"}, `keys create: -tier "anonymous" is not one`},
	} {
		code, out, errOut := cliRun(t, append([]string{"keys", "create"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "no database") {
			t.Errorf("keys create %s: exit %d, want 2 and %q:\n%s%s", strings.Join(tc.args, " "), code, tc.want, out, errOut)
		}
	}
	// A good command line gets as far as the database.
	if code, _, errOut := cliRun(t, "keys", "create", "-name", "x.y-z_1", "-tier", "free"); code != exitError || !strings.Contains(errOut, "database") {
		t.Errorf("keys create -name x.y-z_1 -tier free without a database: exit %d, %s", code, errOut)
	}
}

// failingWriter fails every write, as a closed standard output does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.EBADF }

// A key keys create could not print (its write failed: a full disk, a
// pipe whose reader is gone) is lost to its owner and would work all the
// same: it is revoked, and the command fails (exit 1) saying so.
func TestKeysCreateUnprintedKeyIsRevoked(t *testing.T) {
	t.Parallel()
	admin, name, pool := keyFixture(t, "lost")
	var errOut bytes.Buffer
	code := run(t.Context(), []string{"-log-level", "warn", "-database-admin-url", admin, "keys", "create", "-name", name, "-tier", "free"},
		failingWriter{}, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "could not be printed") || !strings.Contains(errOut.String(), "it was revoked") {
		t.Errorf("keys create with stdout closed: exit %d, %q; want 1, saying the key was revoked", code, errOut.String())
	}
	var active, revoked int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE revoked_at IS NULL), count(*) FILTER (WHERE revoked_at IS NOT NULL)
		FROM geotoll.api_keys WHERE name = $1`, name).Scan(&active, &revoked); err != nil {
		t.Fatal(err)
	}
	if active != 0 || revoked != 1 {
		t.Errorf("keys named %q: %d active, %d revoked; want the one created, revoked", name, active, revoked)
	}
}

// A key written to the null device — standard output redirected there, or
// closed (>&-), which the Go runtime reopens on it — would be lost to its
// owner as surely as one whose write failed: keys create refuses before it
// creates one (a usage error, exit 2).
func TestKeysCreateRefusesANullStandardOutput(t *testing.T) {
	t.Parallel()
	admin, name, pool := keyFixture(t, "null")
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	// Before connecting: a database that does not answer is not reached.
	for _, url := range []string{admin, "postgres://nobody@127.0.0.1:1/none"} {
		var errOut bytes.Buffer
		code := run(t.Context(), []string{"-log-level", "warn", "-database-admin-url", url, "keys", "create", "-name", name, "-tier", "free"}, null, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), "/dev/null") {
			t.Errorf("keys create to /dev/null (database %s): exit %d, %q; want 2, naming /dev/null", url, code, errOut.String())
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM geotoll.api_keys WHERE name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d keys named %q created, want none", n, name)
	}
}

// keyFixture is the admin database URL, a key name of this test's own
// (stem and its prefix), whose keys are deleted when it ends, and a pool.
func keyFixture(t *testing.T, stem string) (admin, name string, pool *pgxpool.Pool) {
	t.Helper()
	admin = testenv.DatabaseURL(t)
	name = strings.ReplaceAll(testenv.Prefix(t), "geotoll-test-", stem)
	pool = testenv.Pool(t)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DELETE FROM geotoll.api_keys WHERE name = $1", name)
	})
	return admin, name, pool
}

// keys create catches SIGPIPE while it writes the key (so that a pipe
// whose reader is gone fails the write, and the key is revoked), but does
// not ignore it: a process started afterwards is killed by SIGPIPE as
// usual (an ignored signal would be inherited).
func TestKeysCreateLeavesSIGPIPEToItsDefault(t *testing.T) {
	bash := testenv.Tool(t, "bash", "the SIGPIPE test")
	admin, name, _ := keyFixture(t, "pipe")
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"-log-level", "warn", "-database-admin-url", admin, "keys", "create", "-name", name, "-tier", "free"}, &out, &errOut); code != 0 {
		t.Fatalf("keys create: exit %d %s", code, errOut.String())
	}
	got, err := exec.CommandContext(t.Context(), bash, "-c", "yes | head -c1 >/dev/null; echo ${PIPESTATUS[0]}").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "141" {
		t.Errorf("yes, its reader gone, exited %s; want 141 (killed by SIGPIPE): the signal is ignored in processes started after keys create", strings.TrimSpace(string(got)))
	}
}
