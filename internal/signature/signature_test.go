package signature_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/signature"
	"github.com/geotoll/geotoll/internal/testenv"
)

// TestSignatureFollowsWrites: every committed INSERT, UPDATE and DELETE
// changes a table's signature, a read does not, and a view has none.
func TestSignatureFollowsWrites(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	schema := testenv.Schema(t, "sig", func(s string) []string {
		return []string{
			"CREATE TABLE " + s + ".t (id int PRIMARY KEY, v int)",
			"INSERT INTO " + s + ".t VALUES (1, 1), (2, 2)",
			"CREATE VIEW " + s + ".v AS SELECT * FROM " + s + ".t",
		}
	})
	table := pgx.Identifier{schema, "t"}.Sanitize()
	read := func() string {
		t.Helper()
		sig, err := signature.Of(ctx, pool, table)
		if err != nil {
			t.Fatal(err)
		}
		if sig.Newest <= 0 || !sig.Versioned {
			t.Fatalf("signature of a table: %+v", sig)
		}
		return sig.String()
	}
	seen := map[string]string{}
	note := func(after string) {
		t.Helper()
		s := read()
		if before, dup := seen[s]; dup {
			t.Errorf("after %s the signature is %q, as after %s", after, s, before)
		}
		seen[s] = after
	}
	note("creation")
	if s := read(); seen[s] != "creation" {
		t.Errorf("a second reading without a write changed the signature to %q", s)
	}
	for _, w := range []string{
		"INSERT INTO " + table + " VALUES (3, 3)",
		"UPDATE " + table + " SET v = 5 WHERE id = 1",
		"DELETE FROM " + table + " WHERE id = 2",
	} {
		if _, err := pool.Exec(ctx, w); err != nil {
			t.Fatal(err)
		}
		note(w)
	}
	if sig, err := signature.Of(ctx, pool, table); err != nil || sig.Rows != 2 {
		t.Errorf("two rows left: %+v, %v", sig, err)
	}
	view, err := signature.Of(ctx, pool, pgx.Identifier{schema, "v"}.Sanitize())
	if err != nil || view.String() != "" || view.Versioned {
		t.Errorf("a view's signature: %+v, %v; want none", view, err)
	}
	counted, err := signature.Read(ctx, pool, pgx.Identifier{schema, "v"}.Sanitize(), false)
	if err != nil || counted.Rows != 2 || counted.String() != "" {
		t.Errorf("a view read for its count: %+v, %v; want 2 rows and no signature", counted, err)
	}
	if _, err := signature.Of(ctx, pool, pgx.Identifier{schema, "missing"}.Sanitize()); err == nil {
		t.Errorf("a missing relation has a signature")
	}
}

// TestSignatureSeesAnUpdateCommittedAfterANewerWrite: a transaction takes
// its id at its first write, not at its commit, so an UPDATE by a
// transaction that began writing before another one committed carries the
// older id. The signature read between the two commits (as `geotoll
// prepare` reads it for the build it records) must differ from the one
// after the older transaction commits: else the storage built from the
// snapshot without the update is found current by every later run.
func TestSignatureSeesAnUpdateCommittedAfterANewerWrite(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	schema := testenv.Schema(t, "sigorder", func(s string) []string {
		return []string{
			"CREATE TABLE " + s + ".t (id int PRIMARY KEY, v int)",
			"INSERT INTO " + s + ".t VALUES (1, 1), (2, 2)",
		}
	})
	table := pgx.Identifier{schema, "t"}.Sanitize()
	older, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = older.Rollback(ctx) }()
	// The older transaction takes its id with this write...
	if _, err := older.Exec(ctx, "UPDATE "+table+" SET v = 10 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	// ...a newer one writes and commits first.
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" VALUES (3, 3)"); err != nil {
		t.Fatal(err)
	}
	before, err := signature.Of(ctx, pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := signature.Of(ctx, pool, table)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := pool.QueryRow(ctx, "SELECT v FROM "+table+" WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("the update is not visible: v = %d, %v", v, err)
	}
	if before.String() == after.String() {
		t.Errorf("signature %q before the older transaction's UPDATE committed and %q after it: the same, so the change is missed",
			before.String(), after.String())
	}
}

// A detector recorded in an older form — before the checksum was added
// ("rows:newest"), before the columns' fingerprint was
// ("rows:newest:writers") — still names the table it was read from while
// the parts it has match: a server upgraded before `geotoll prepare` runs
// again keeps reading what was built. So does one recorded in the
// fingerprint's first form (16 hex digits without v2-), whose fingerprint
// read missing values by the session's settings: its other parts decide.
func TestSameAcceptsTheFormWithoutChecksum(t *testing.T) {
	cur := signature.Signature{Rows: 3, Newest: 806, Writers: -12345, Columns: "v2-0123456789abcdef", Versioned: true}.String()
	for _, c := range []struct {
		recorded string
		want     bool
	}{
		{cur, true},
		{"3:806", true},
		{"3:806:-12345", true},
		{"3:807", false},
		{"4:806", false},
		{"3:806:1", false},
		// The fingerprint's first form (no v2-): its other parts decide.
		{"3:806:-12345:fedcba9876543210", true},
		{"3:807:-12345:0123456789abcdef", false},
		{"3:806:-12345:v2-fedcba9876543210", false},
		{"3:806:-12345:", false},
		{"3:806:-12345:v2-0123456789abcdef:x", false},
		{"3", false},
		{"", false},
		{"3:806:", false},
		{":806", false},
		{"3::-12345", false},
	} {
		if got := signature.Same(c.recorded, cur); got != c.want {
			t.Errorf("Same(%q, %q) = %v, want %v", c.recorded, cur, got, c.want)
		}
	}
	if signature.Same("", "") || signature.Same("3:806", "") {
		t.Error("a relation without a detector matched")
	}
}

// TestSignatureFollowsColumnChanges: schema changes that change what the
// rows hold without writing one — columns swapped by renames, a column
// dropped and added again under its name with a DEFAULT, a type changed
// to a binary-coercible one — change the signature though no xmin moves;
// a column's DEFAULT expression, which fills only rows written later,
// and a comment do not.
func TestSignatureFollowsColumnChanges(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	schema := testenv.Schema(t, "sigcols", func(s string) []string {
		return []string{
			"CREATE TABLE " + s + ".t (id int PRIMARY KEY, a text, b text, c varchar(10))",
			"INSERT INTO " + s + ".t VALUES (1, 'a1', 'b1', 'c1'), (2, 'a2', 'b2', 'c2')",
		}
	})
	table := pgx.Identifier{schema, "t"}.Sanitize()
	read := func() signature.Signature {
		t.Helper()
		sig, err := signature.Of(ctx, pool, table)
		if err != nil {
			t.Fatal(err)
		}
		if len(sig.Columns) != 19 || !strings.HasPrefix(sig.Columns, "v2-") {
			t.Fatalf("columns' fingerprint %q, want v2- and 16 hex digits", sig.Columns)
		}
		return sig
	}
	prev := read()
	for _, c := range []struct {
		change  []string
		changes bool
	}{
		{[]string{"ALTER TABLE " + table + " RENAME COLUMN a TO tmp", "ALTER TABLE " + table + " RENAME COLUMN b TO a",
			"ALTER TABLE " + table + " RENAME COLUMN tmp TO b"}, true},
		{[]string{"ALTER TABLE " + table + " DROP COLUMN b", "ALTER TABLE " + table + " ADD COLUMN b text DEFAULT 'NEW'"}, true},
		{[]string{"ALTER TABLE " + table + " DROP COLUMN b", "ALTER TABLE " + table + " ADD COLUMN b text"}, true},
		{[]string{"ALTER TABLE " + table + " ALTER COLUMN c TYPE text"}, true},
		{[]string{"ALTER TABLE " + table + " ALTER COLUMN a SET DEFAULT 'later'"}, false},
		{[]string{"COMMENT ON COLUMN " + table + ".a IS 'a column'"}, false},
	} {
		for _, s := range c.change {
			if _, err := pool.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		now := read()
		if now.Rows != prev.Rows || now.Newest != prev.Newest || now.Writers != prev.Writers {
			t.Errorf("%v rewrote rows: %s, then %s", c.change, prev, now)
		}
		if changed := now.String() != prev.String(); changed != c.changes {
			t.Errorf("%v: signature %s, then %s; want a change: %v", c.change, prev, now, c.changes)
		}
		if signature.Same(prev.String(), now.String()) == c.changes {
			t.Errorf("%v: Same(%s, %s) = %v", c.change, prev, now, !c.changes)
		}
		prev = now
	}
}

// A signature is the table's, not the session's: a column added with a
// constant DEFAULT reads the same under any TimeZone, DateStyle or
// extra_float_digits (prepare and the servers may run under different
// ones), and VACUUM FULL, which rewrites no value, leaves it as it was.
func TestSignatureIsTheSameInEverySession(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	schema := testenv.Schema(t, "sigsess", func(s string) []string {
		return []string{
			"CREATE TABLE " + s + ".t (id int PRIMARY KEY)",
			"INSERT INTO " + s + ".t VALUES (1), (2)",
			"ALTER TABLE " + s + ".t ADD COLUMN seen timestamptz DEFAULT '2020-01-01 00:00:00+00', ADD COLUMN w float8 DEFAULT 0.1",
		}
	})
	table := pgx.Identifier{schema, "t"}.Sanitize()
	read := func(settings ...string) string {
		t.Helper()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, s := range settings {
			if _, err := tx.Exec(ctx, "SET LOCAL "+s); err != nil {
				t.Fatal(err)
			}
		}
		sig, err := signature.Of(ctx, tx, table)
		if err != nil {
			t.Fatal(err)
		}
		return sig.String()
	}
	utc := read("TimeZone = 'UTC'")
	for _, settings := range [][]string{
		{"TimeZone = 'Asia/Tokyo'"},
		{"TimeZone = 'America/New_York'", "DateStyle = 'SQL, DMY'"},
		{"extra_float_digits = 0"},
	} {
		if got := read(settings...); got != utc {
			t.Errorf("under %v: %s, under UTC %s", settings, got, utc)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM FULL "+table); err != nil {
		t.Fatal(err)
	}
	if got := read("TimeZone = 'UTC'"); got != utc {
		t.Errorf("after VACUUM FULL: %s, before %s", got, utc)
	}
}
