package main

import (
	"context"
	"strings"
	"testing"

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
