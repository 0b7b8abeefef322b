package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// promtool.sh installs Debian's prometheus package for its promtool
// without leaving the package's server running or enabled: while apt-get
// installs, a policy-rc.d forbids starting services (exit 101), it is
// removed afterwards, and the server is disabled at boot. The commands it
// runs are stand-ins that record what they saw; id says root.
func TestPromtoolInstallLeavesNoServerRunning(t *testing.T) {
	t.Parallel()
	bin, dir := t.TempDir(), t.TempDir()
	calls := filepath.Join(dir, "calls")
	policy := filepath.Join(dir, "policy-rc.d")
	stub := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("id", "echo 0")
	stub("sleep", "exit 0")
	// apt-get install records whether the policy forbids starting a
	// service as the package's scripts would ask it, then "installs" promtool.
	stub("apt-get", `echo "apt-get $*" >>`+calls+`
case "$1" in install)
	if [ -x `+policy+` ]; then `+policy+` prometheus start; echo "policy says $?" >>`+calls+`; else echo "no policy" >>`+calls+`; fi
	printf '#!/bin/sh\nexit 0\n' >`+bin+`/promtool; chmod 755 `+bin+`/promtool;;
esac`)
	stub("systemctl", `echo "systemctl $*" >>`+calls)
	stub("update-rc.d", `echo "update-rc.d $*" >>`+calls)
	for _, tool := range []string{"bash", "cat", "chmod", "dirname", "env", "printf", "rm", "tee"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(path, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	script, err := filepath.Abs("promtool.sh")
	if err != nil {
		t.Fatal(err)
	}
	run := func() ([]byte, error) {
		cmd := exec.Command(script)
		cmd.Env = []string{"PATH=" + bin, "POLICY_RC_D=" + policy, "HOME=" + dir}
		return cmd.CombinedOutput()
	}
	if out, err := run(); err != nil {
		t.Fatalf("promtool.sh: %v\n%s", err, out)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	log := string(got)
	for _, want := range []string{"apt-get install -y -q --no-install-recommends prometheus", "policy says 101",
		"systemctl disable --now prometheus.service", "update-rc.d prometheus disable"} {
		if !strings.Contains(log, want) {
			t.Errorf("calls:\n%s\nwant %q", log, want)
		}
	}
	if _, err := os.Stat(policy); !os.IsNotExist(err) {
		t.Errorf("the policy-rc.d it placed is still there (%v)", err)
	}

	// Run again: promtool is there, nothing is installed.
	if err := os.Remove(calls); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err != nil {
		t.Fatalf("promtool.sh again: %v\n%s", err, out)
	}
	if _, err := os.Stat(calls); !os.IsNotExist(err) {
		t.Error("promtool.sh ran commands although promtool was installed")
	}
}
