package scripts_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTestBinary stands for a test binary: it writes its arguments, one
// call a line, to the file $CALLS and exits with $FIRST_STATUS when it was
// given a -test.run, else with $REST_STATUS.
const fakeTestBinary = `#!/bin/sh
echo "$*" >>"$CALLS"
case "$*" in *-test.run=*) exit "${FIRST_STATUS:-0}" ;; esac
exit "${REST_STATUS:-0}"
`

// TestMutateExecRunsTheFirstTestsFirst checks scripts/mutate-exec.sh: the
// tests MUTATE_FIRST names run first, the others only when those pass and
// never twice, and the exit status is the failing step's.
func TestMutateExecRunsTheFirstTestsFirst(t *testing.T) {
	const first = "^(TestA|TestB)$"
	tests := []struct {
		name        string
		first       string
		args        []string
		firstStatus string
		restStatus  string
		wantStatus  int
		wantCalls   []string
	}{
		{"no MUTATE_FIRST: one call as given", "", []string{"-test.skip=^TestS$", "-test.failfast=true"}, "0", "1", 1,
			[]string{"-test.skip=^TestS$ -test.failfast=true"}},
		{"both steps pass", first, []string{"-test.skip=^TestS$", "-test.failfast=true"}, "0", "0", 0,
			[]string{"-test.run=" + first + " -test.skip=^TestS$ -test.failfast=true", "-test.skip=" + first + "|^TestS$ -test.failfast=true"}},
		{"a first test fails: the rest never runs", first, []string{"-test.skip=^TestS$", "-test.failfast=true"}, "1", "0", 1,
			[]string{"-test.run=" + first + " -test.skip=^TestS$ -test.failfast=true"}},
		{"a panic's status is kept", first, []string{"-test.failfast=true"}, "2", "0", 2,
			[]string{"-test.run=" + first + " -test.failfast=true"}},
		{"another test fails", first, []string{"-test.timeout=1m0s"}, "0", "1", 1,
			[]string{"-test.run=" + first + " -test.timeout=1m0s", "-test.skip=" + first + " -test.timeout=1m0s"}},
		{"a -run of the call's own: one call as given", first, []string{"-test.run=^TestC$", "-test.skip=^TestS$"}, "0", "1", 0,
			[]string{"-test.run=^TestC$ -test.skip=^TestS$"}},
		{"a coverage run: one call as given", first, []string{"-test.gocoverdir=/c", "-test.coverprofile=/c/p.out"}, "0", "1", 1,
			[]string{"-test.gocoverdir=/c -test.coverprofile=/c/p.out"}},
	}
	script, err := filepath.Abs("mutate-exec.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bin, calls := filepath.Join(dir, "pkg.test"), filepath.Join(dir, "calls")
			if err := os.WriteFile(bin, []byte(fakeTestBinary), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(script, append([]string{bin}, tt.args...)...)
			cmd.Env = append(os.Environ(), "MUTATE_FIRST="+tt.first, "CALLS="+calls,
				"FIRST_STATUS="+tt.firstStatus, "REST_STATUS="+tt.restStatus)
			status := 0
			if err := cmd.Run(); err != nil {
				var exit *exec.ExitError
				if !errors.As(err, &exit) {
					t.Fatal(err)
				}
				status = exit.ExitCode()
			}
			b, err := os.ReadFile(calls)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			if status != tt.wantStatus || strings.Join(got, "\n") != strings.Join(tt.wantCalls, "\n") {
				t.Errorf("exit %d, calls\n%s\nwant exit %d, calls\n%s", status, strings.Join(got, "\n"), tt.wantStatus, strings.Join(tt.wantCalls, "\n"))
			}
		})
	}
}
