package pgcall

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/geotoll/geotoll/problem"
)

// mismatchCodes are the SQLSTATEs of a statement that does not fit the
// database it runs on: a table, schema, column or function it names is
// missing, a type does not fit, or the role may not read what it names.
// The statements are the configuration's, not the request's, so no retry
// by the client cures them: they are answered 503 with the reason (the
// layer checks in /readyz say what to fix), never 500.
var mismatchCodes = map[string]bool{
	"42P01": true, // undefined_table
	"3F000": true, // invalid_schema_name
	"42703": true, // undefined_column
	"42883": true, // undefined_function: e.g. a geometry function on a column of another type
	"42804": true, // datatype_mismatch
	"42501": true, // insufficient_privilege
}

// misfits reports whether pgErr is a statement's that does not fit the
// database (mismatchCodes), or PostGIS's refusal of a row whose SRID the
// layer's srid does not take: a geometry column that declares no SRID
// holds a row in another (ST_Transform of an unknown SRID 0, mixed SRIDs
// in one operation) or a point outside its projection's domain
// ("transform: …"). PostGIS raises these as internal_error (XX000); no
// retry by the client cures them either, and the layer checks cannot see
// them, as they read no rows. (The tile store draws a tile whose
// transform failed again with a transform that leaves such rows out —
// tiles.Store.Render — and answers this only when that fails too.)
//
// So is PostGIS's refusal of a geometry type an operation does not take —
// a curve (CIRCULARSTRING, CURVEPOLYGON, COMPOUNDCURVE…) met by the tile
// query's clip or snap, an overview's simplification, a GeoJSON answer or
// a geography: "unsupported geometry type", "lwgeom_get_basic_type:
// Invalid type (N)", "geometry type not supported", "Geography type does
// not support" (the last invalid_parameter_value, 22023) — which a row of
// the layer's table holds: a 503 naming the layer, never a 500.
func misfits(pgErr *pgconn.PgError) bool {
	if mismatchCodes[pgErr.Code] {
		return true
	}
	switch pgErr.Code {
	case "XX000":
		return strings.Contains(pgErr.Message, "SRID") || transformFailed(pgErr) || unsupportedType(pgErr.Message)
	case "22023": // invalid_parameter_value: "Geography type does not support CurvePolygon"
		return unsupportedType(pgErr.Message)
	}
	return false
}

// unsupportedType reports whether msg is PostGIS's refusal of a geometry
// type (see misfits): a clip's, a simplification's, a GeoJSON answer's, a
// geography's.
func unsupportedType(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "unsupported geometry type") || strings.Contains(m, "geometry type not supported") ||
		strings.HasPrefix(msg, "lwgeom_get_basic_type: Invalid type") || strings.HasPrefix(msg, "Geography type does not support")
}

// TransformFailed reports whether err is PostGIS's refusal to transform a
// point outside a projection's domain ("transform: …").
func TransformFailed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && transformFailed(pgErr)
}

func transformFailed(pgErr *pgconn.PgError) bool {
	return pgErr.Code == "XX000" && strings.HasPrefix(pgErr.Message, "transform:")
}

// Misfit names subject (`layer "places"`) in the answer to a call that
// failed because its statement does not fit the database; any other err
// is returned as it is.
func Misfit(err error, subject string) error {
	var (
		p     *problem.Error
		pgErr *pgconn.PgError
	)
	if !errors.As(err, &pgErr) || !misfits(pgErr) || !errors.As(err, &p) || p.Code != problem.Unavailable {
		return err
	}
	return &problem.Error{Code: problem.Unavailable, Detail: subject + " does not match the database: " + pgErr.Message,
		RetryAfter: p.RetryAfter, Err: err}
}

// MissingRelation returns the message of err when it is a statement's
// that named a relation that does not exist (SQLSTATE 42P01; the message
// names it, "schema.relation" in quotes), else "": serving storage
// dropped under a server that still reads it.
func MissingRelation(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return pgErr.Message
	}
	return ""
}
