package geofence

import (
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/signature"
	"github.com/geotoll/geotoll/internal/testenv"
)

// Pieces cut before a schema change that changes what the rows hold
// without writing one (the name column renamed away, another added under
// its name with a DEFAULT, stored once in the catalog: no xmin moves)
// answer with the old names: the change detector recorded in full form
// (package signature: its columns' fingerprint) differs from the table's
// now, and the layer reads its table until prepare cuts them again.
func TestColumnChangeMakesThePiecesStale(t *testing.T) {
	zones, roads := zonePieces(t)
	owner := testenv.Pool(t)
	table := ident(zones.Table)
	sig, err := signature.Of(ctxT(t), owner, table)
	if err != nil {
		t.Fatal(err)
	}
	// As prepare records it now (the fixture records the older form).
	tag, err := owner.Exec(ctxT(t), `UPDATE geotoll_serving.storage SET source_signature = $1 WHERE source_table = $2`, sig.String(), table)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("record %s: %v, %d rows", sig, err, tag.RowsAffected())
	}
	cat, read := zonesOnPieces(t, "before the change", zones, roads)
	for _, s := range []string{
		`ALTER TABLE ` + table + ` RENAME COLUMN name TO name_old`,
		`ALTER TABLE ` + table + ` ADD COLUMN name text DEFAULT 'NEW'`,
	} {
		if _, err := owner.Exec(ctxT(t), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	warnings, err := cat.LoadContainment(ctxT(t), read)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := cat.Containment("zones")
	if err != nil || ct.Pieces || len(warnings) != 1 || !strings.Contains(warnings[0], "changed since") {
		t.Fatalf("after the change: %+v, %v, warnings %q; want the table, with a warning", ct, err, warnings)
	}
}
