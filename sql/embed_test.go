package sql_test

import (
	"strings"
	"testing"

	queries "github.com/geotoll/geotoll/sql"
)

func TestEveryQueryIsEmbedded(t *testing.T) {
	for _, name := range []string{"tile.sql"} {
		text, err := queries.Read(name)
		if err != nil {
			t.Fatalf("Read(%q): %v", name, err)
		}
		if !strings.Contains(text, "$1") {
			t.Errorf("%s binds no parameters", name)
		}
	}
	if _, err := queries.Read("nope.sql"); err == nil {
		t.Error("Read of a missing file returned no error")
	}
}
