// Package sql holds geotoll's query text as .sql files, embedded into the
// binary. Import it under an alias (the folder name shadows database/sql):
//
//	import queries "github.com/geotoll/geotoll/sql"
//
// Queries are constant: values are always bound as $n parameters. The few
// identifiers a query needs (a layer's table and columns) come from the
// server's configuration, are quoted with pgx.Identifier, and are filled in
// once at start-up — never from request text.
package sql

import "embed"

// FS holds every *.sql file of this folder.
//
//go:embed *.sql
var FS embed.FS

// Read returns the text of one embedded query file. Files are compiled
// in, so a missing name is a programming error caught by tests.
func Read(name string) (string, error) {
	b, err := FS.ReadFile(name)
	return string(b), err
}

// MustRead returns the text of one embedded query file, for package-level
// variables: like regexp.MustCompile it panics on a name that is not
// there, a build defect that fails every test of the package at once.
func MustRead(name string) string {
	text, err := Read(name)
	if err != nil {
		panic(err)
	}
	return text
}
