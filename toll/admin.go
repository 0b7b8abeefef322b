package toll

import (
	"net/http"
	"time"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/problem"
)

// staleRing is a key ring that knows when its keys are too old to trust
// with admin rights; *apikeys.Ring is one.
type staleRing interface {
	Stale() bool
	StaleAfter() time.Duration
}

var _ staleRing = (*apikeys.Ring)(nil)

// AllowAdmin implements geofence.Authorizer: the request carries, in a
// header (never ?key=, which ends up in logs), an active API key marked
// admin. A key the ring does not hold is rechecked (a reload of the keys)
// only while its client's failed-auth bucket does not refuse it already,
// as on the priced routes: a refused guesser's guesses cost no reload.
func (t *Toll) AllowAdmin(r *http.Request) bool {
	if t.Keys == nil {
		return false
	}
	key, _ := apikeys.Presented(r, false)
	if k, ok := t.Keys.Lookup(key); ok {
		return k.Admin
	}
	if t.refusedFree(t.failedAuthCaller(r)) {
		return false
	}
	k, ok := t.lookup(r.Context(), key)
	return ok && k.Admin
}

// adminKey looks up the key a request presents in a header, without a
// recheck: RefuseAdmin follows an AllowAdmin, which made one.
func (t *Toll) adminKey(r *http.Request) (apikeys.Key, bool) {
	if t.Keys == nil {
		return apikeys.Key{}, false
	}
	key, _ := apikeys.Presented(r, false)
	return t.Keys.Lookup(key)
}

// RefuseAdmin implements geofence.AdminRefuser. A valid key without admin
// rights gets 403 and is charged nothing: it proved who it is, and charging
// its IP's failed-auth bucket would lock out everyone behind the same NAT.
// Anything else (no key, an unknown or revoked one) costs the caller's IP
// one failed-auth token (401, then 429 once they run out); a request
// without a key in a header (none, or one in ?key=) is told where it goes.
func (t *Toll) RefuseAdmin(w http.ResponseWriter, r *http.Request) {
	if keyRepeated(w, r, false) {
		return
	}
	if _, ok := t.adminKey(r); ok {
		detail := "this API key may not administer fences"
		if ring, ok := t.Keys.(staleRing); ok && ring.Stale() {
			detail += " (admin rights are suspended while the server cannot reload its API keys)"
		}
		problem.Write(w, r, &problem.Error{Code: problem.Forbidden, Detail: detail})
		return
	}
	detail := unknownKey
	if key, _ := apikeys.Presented(r, false); key == "" {
		detail = "fence admin needs an admin API key in X-API-Key or Authorization: Bearer (never ?key=, which ends up in logs)"
	}
	t.refuseKey(w, r, t.failedAuthCaller(r), Price{Route: "admin", Zoom: -1}, detail)
}
