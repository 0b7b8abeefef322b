package sql_test

import (
	"io/fs"
	"strings"
	"testing"

	queries "github.com/geotoll/geotoll/sql"
)

// Every embedded query file is readable, non-empty, and has no string
// formatting verbs: values are bound as $n, never spliced in.
func TestEveryQueryIsEmbedded(t *testing.T) {
	names, err := fs.Glob(queries.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("only %d query files embedded: %v", len(names), names)
	}
	for _, name := range names {
		text, err := queries.Read(name)
		if err != nil {
			t.Fatalf("Read(%q): %v", name, err)
		}
		if strings.TrimSpace(text) == "" {
			t.Errorf("%s is empty", name)
		}
		for _, verb := range []string{"%s", "%v", "%d", "%q"} {
			if strings.Contains(text, verb) {
				t.Errorf("%s contains the formatting verb %s", name, verb)
			}
		}
	}
	if _, err := queries.Read("nope.sql"); err == nil {
		t.Error("Read of a missing file returned no error")
	}
}
