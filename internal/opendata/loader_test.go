package opendata

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
)

// cached opens src's data from the tarball in the default cache dir, when
// `geotoll opendata` has fetched it on this machine; the tests never
// download anything.
func cached(t *testing.T, src Source) io.ReadCloser {
	t.Helper()
	path := filepath.Join(DefaultCacheDir(), src.Tarball())
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	if err := src.Verify(path); err != nil {
		t.Fatalf("the cached tarball is not the pinned one: %v", err)
	}
	rc, err := src.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

// fixtures returns the cities and a countries reader: the real packages'
// when they are cached, else the synthetic ones (testCities, and the
// committed GeoJSON whose second feature is an invalid bow tie).
func fixtures(t *testing.T) (cities []City, countries io.Reader, want int64, invalid int64) {
	t.Helper()
	cities, want, invalid = testCities, 3, 1
	if rc := cached(t, Cities); rc != nil {
		var err error
		if cities, err = ReadCities(rc); err != nil {
			t.Fatal(err)
		}
	}
	if rc := cached(t, CountriesLand10m); rc != nil {
		t.Log("using the cached countries tarball (first 2 features)")
		return cities, rc, 2, -1
	}
	f, err := os.Open("testdata/countries.geo.json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return cities, f, want, invalid
}

func testSchema(t *testing.T, pool *pgxpool.Pool) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "opendata_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop %s: %v", schema, err)
		}
	})
	return schema
}

func TestLoaderIntegration(t *testing.T) {
	pool := testenv.Pool(t)
	read := testenv.ReadPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema := testSchema(t, pool)
	cities, countries, wantCountries, wantInvalid := fixtures(t)

	l, err := NewLoader(pool, Options{Schema: schema, Points: 5000, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	pts, err := l.LoadPoints(ctx, cities, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	if pts.Rows != 5000 || pts.Skipped {
		t.Fatalf("points: %+v, want 5000 rows loaded", pts)
	}
	cs, err := l.LoadCountries(ctx, countries, "fixture", 2)
	if err != nil {
		t.Fatal(err)
	}
	if wantCountries == 3 {
		wantCountries = 2 // the limit: AAA and the bow tie
	}
	if cs.Rows != wantCountries || cs.Vertices == 0 || cs.MaxVertices == 0 || (wantInvalid >= 0 && cs.Invalid != wantInvalid) {
		t.Fatalf("countries: %+v, want %d rows (%d invalid, kept)", cs, wantCountries, wantInvalid)
	}
	simple, err := l.LoadSimplified(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if simple.Rows != cs.Rows || simple.Vertices > cs.Vertices {
		t.Fatalf("countries_simple %+v from countries %+v", simple, cs)
	}

	// The read role sees every table, with both geometry columns set and
	// the generated points identical to what the generator yields.
	gen := NewPoints(cities, 5000, 3)
	for gen.Next() && gen.Point().ID < 4321 {
	}
	want := gen.Point()
	var got Point
	err = read.QueryRow(ctx, `SELECT id, name, kind, city, country, rank, population, ST_X(geom), ST_Y(geom)
FROM `+pgx.Identifier{schema, "points"}.Sanitize()+` WHERE id = 4321 AND ST_SRID(geom_3857) = 3857`).
		Scan(&got.ID, &got.Name, &got.Kind, &got.City, &got.Country, &got.Rank, &got.Population, &got.Lon, &got.Lat)
	if err != nil || got != want {
		t.Fatalf("point 4321 read back as %+v (%v), generated %+v", got, err, want)
	}
	for _, table := range []string{"countries", "countries_simple"} {
		var n int64
		q := `SELECT count(*) FROM ` + pgx.Identifier{schema, table}.Sanitize() + ` WHERE geom_3857 IS NOT NULL AND ST_GeometryType(geom) = 'ST_MultiPolygon'`
		if err := read.QueryRow(ctx, q).Scan(&n); err != nil || n != cs.Rows {
			t.Fatalf("%s as the read role: %d rows (%v), want %d", table, n, err, cs.Rows)
		}
	}

	// Idempotent: the same parameters skip; Force reloads.
	again, err := l.LoadPoints(ctx, cities, "fixture")
	if err != nil || !again.Skipped || again.Rows != 5000 {
		t.Fatalf("second load: %+v, %v; want skipped with 5000 rows", again, err)
	}
	forced, err := NewLoader(pool, Options{Schema: schema, Points: 2000, Seed: 3, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	re, err := forced.LoadPoints(ctx, cities, "fixture")
	if err != nil || re.Skipped || re.Rows != 2000 {
		t.Fatalf("forced reload: %+v, %v; want 2000 rows loaded", re, err)
	}
}

func TestLoaderRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Schema: `x"; DROP TABLE y; --`},
		{Reader: "Robert'); --"},
		{Points: -1},
		{Points: maxPoints + 1},
	} {
		if _, err := NewLoader(nil, o); err == nil {
			t.Errorf("NewLoader(%+v) accepted", o)
		}
	}
}
