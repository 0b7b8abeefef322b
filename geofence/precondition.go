package geofence

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/geotoll/geotoll/internal/etag"
	"github.com/geotoll/geotoll/problem"
)

// fenceETag is the entity tag of a fence at a revision: strong, the
// revision quoted. A revision is the number of the write that last changed
// the fence (see migration 10), so the tag changes on every write and only
// then, and reads the same on every replica.
func fenceETag(revision int64) string { return `"` + strconv.FormatInt(revision, 10) + `"` }

// Preconditions are a fence request's If-Match and If-None-Match (RFC 9110
// §13.1.1, §13.1.2), parsed (package etag); the zero value has none. The
// store checks a write's against the fence's current ETag under the row's
// lock, in the write's own transaction, so that no other write comes
// between the check and the write. If-Modified-Since and
// If-Unmodified-Since are not evaluated (the fence admin sends no
// Last-Modified).
type Preconditions = etag.Conditions

// ParsePreconditions reads r's If-Match and If-None-Match: a header that
// does not parse is a 400 naming it (etag.ParseConditions).
func ParsePreconditions(h http.Header) (Preconditions, error) { return etag.ParseConditions(h) }

// failedOnCollection evaluates p for the collection of fences, which a
// POST writes to: it exists but has no ETag, so If-Match holds only as
// "*" and If-None-Match "*" never does (RFC 9110 §13.1.1, §13.1.2). It
// returns the header whose condition is false, or "".
func failedOnCollection(p Preconditions) string {
	if p.IfMatch != nil && !p.IfMatch.Any {
		return "If-Match"
	}
	if p.IfNoneMatch != nil && p.IfNoneMatch.Any {
		return "If-None-Match"
	}
	return ""
}

// preconditionFailed is the 412 of a fence request whose header named the
// fence's current state falsely; write says it was a write, which did not
// happen.
func preconditionFailed(id int64, header string, write bool) error {
	detail := fmt.Sprintf("fence %d is not at an ETag If-Match names (compared strongly: a weak W/ tag never matches); "+
		"it has changed since that ETag was read", id)
	if header == "If-None-Match" {
		detail = fmt.Sprintf("fence %d exists, at an ETag If-None-Match names (or it names *)", id)
	}
	if write {
		detail += ": nothing was written"
		if header == "If-Match" {
			detail += "; GET the fence again and reapply the change to it"
		}
	}
	return &problem.Error{Code: problem.PreconditionFailed, Param: header, Detail: detail}
}

// collectionPreconditionFailed is the 412 of a request to the collection
// of fences whose header cannot hold for it (see failedOnCollection);
// write says it was a write, which did not happen.
func collectionPreconditionFailed(header string, write bool) error {
	detail := header + " cannot hold for the collection of fences, which has no ETag (If-Match holds only as *, If-None-Match * never)"
	if write {
		detail += ": nothing was written"
	}
	return &problem.Error{Code: problem.PreconditionFailed, Param: header, Detail: detail}
}
