package loadtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Pgbench.Exec, run with a stand-in pgbench that writes down its command
// line and PGPASSWORD: the database URL's password reaches pgbench
// through its environment, never its command line (readable by every
// user of the host in ps and /proc/PID/cmdline).
func TestPgbenchExecPassesThePasswordInItsEnvironment(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "pgbench")
	script := `#!/bin/sh
printf '%s\n' "$@" > "` + dir + `/args"
printf '%s' "$PGPASSWORD" > "` + dir + `/password"
echo 'number of transactions actually processed: 10/10'
echo 'tps = 123.4 (without initial connection time)'
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil { //nolint:gosec // G306: a test's stand-in executable
		t.Fatal(err)
	}
	t.Setenv("PGPASSWORD", "")
	p := Pgbench{Path: fake, DatabaseURL: "postgres://reader:hunter2@127.0.0.1:5432/geotoll?sslmode=disable", Transactions: 5, Dir: dir}
	r, err := p.Exec(context.Background(), "SELECT 1;\n", "places")
	if err != nil || r.TPS != 123.4 || r.Transactions != 10 {
		t.Fatalf("Exec = %+v, %v", r, err)
	}
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(args), "hunter2") {
		t.Errorf("the password on pgbench's command line:\n%s", args)
	}
	if !strings.Contains(string(args), "\npostgres://reader@127.0.0.1:5432/geotoll?sslmode=disable\n") {
		t.Errorf("no database (without its password) on pgbench's command line:\n%s", args)
	}
	if pw, err := os.ReadFile(filepath.Join(dir, "password")); err != nil || string(pw) != "hunter2" {
		t.Errorf("pgbench's PGPASSWORD %q, %v; want the URL's", pw, err)
	}
}
