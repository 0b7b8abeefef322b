package tiles

import "testing"

// A metadata document's ETag is weak and leaves its storage's ages out,
// and only them.
func TestMetaETagLeavesTheAgesOut(t *testing.T) {
	t.Parallel()
	doc := func(age, rows string) []byte {
		return []byte(`{"storage":[{"builder":"overview","rows":` + rows + `,"age_seconds":` + age + `},{"age_seconds":` + age + `}],"name":"age_seconds"}` + "\n")
	}
	a := metaETag(doc("3", "10"))
	if a[:3] != `W/"` {
		t.Fatalf("ETag %q, want a weak tag", a)
	}
	if b := metaETag(doc("4190", "10")); b != a {
		t.Errorf("another age: ETag %q, want %q", b, a)
	}
	if c := metaETag(doc("3", "11")); c == a {
		t.Errorf("another row count: the same ETag %q", c)
	}
}
