package server

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/problem"
)

// KeyLookup finds an active API key; *apikeys.Ring is the production one.
type KeyLookup interface {
	Lookup(key string) (apikeys.Key, bool)
}

// AnonymousTier is the tier of callers without an API key, bucketed per
// client IP. FailedAuthTier buckets presented-but-unknown keys per client
// IP, so guessing keys ends in 429.
const (
	AnonymousTier  = "anonymous"
	FailedAuthTier = "failed-auth"
)

// Caller is who pays for a request.
type Caller struct {
	Tier     string // name of the tier whose limit applies
	Identity string // stable, non-secret bucket identity ("k:<id>" or "ip:<addr>")
	KeyName  string // the API key's name, if any
	Admin    bool
}

// APIKey returns the key a request presents: the X-API-Key header, else an
// "Authorization: Bearer" token, else the ?key= query parameter (for map
// clients that cannot set headers; it is redacted in logs). present is false
// when there is none; a key longer than apikeys.MaxKeyLength or with
// characters outside visible ASCII is returned as presented but will never
// match.
func APIKey(r *http.Request) (key string, present bool) {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k, true
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, token, ok := strings.Cut(auth, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(token), true
		}
	}
	if r.URL != nil {
		if k := r.URL.Query().Get("key"); k != "" {
			return k, true
		}
	}
	return "", false
}

// identify names the caller. ok is false when the request presents a key
// that is unknown or revoked; the caller is then its client IP in the
// failed-auth tier, and no bucket is ever made for the key itself.
func (t *Toll) identify(r *http.Request) (c Caller, ok bool) {
	ip := "ip:" + bucketIP(t.Proxies.ClientAddr(r))
	key, present := APIKey(r)
	if !present {
		return Caller{Tier: AnonymousTier, Identity: ip}, true
	}
	if t.Keys != nil {
		if k, found := t.Keys.Lookup(key); found {
			return Caller{Tier: k.Tier, Identity: "k:" + strconv.FormatInt(k.ID, 10), KeyName: k.Name, Admin: k.Admin}, true
		}
	}
	return Caller{Tier: FailedAuthTier, Identity: ip}, false
}

// bucketIP is the bucket identity of a client address: the IPv4 address, or
// the /64 of an IPv6 address (one subscriber usually holds a whole /64).
func bucketIP(addr netip.Addr) string {
	if !addr.IsValid() {
		return "unknown"
	}
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// compile-time check: the ring is a KeyLookup.
var _ KeyLookup = (*apikeys.Ring)(nil)

// Proxies is re-exported for configuration.
type Proxies = *forwarded.Trusted

// AllowAdmin implements geofence.Authorizer: the request carries, in a
// header (never ?key=, which ends up in logs), an active API key marked
// admin.
func (t *Toll) AllowAdmin(r *http.Request) bool {
	k, ok := t.headerKey(r)
	return ok && k.Admin
}

// headerKey looks up the key a request presents in a header (X-API-Key or
// Authorization: Bearer).
func (t *Toll) headerKey(r *http.Request) (apikeys.Key, bool) {
	if t.Keys == nil {
		return apikeys.Key{}, false
	}
	key := r.Header.Get("X-API-Key")
	if key == "" {
		if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			key = strings.TrimSpace(token)
		}
	}
	return t.Keys.Lookup(key)
}

// RefuseAdmin implements geofence.AdminRefuser. A valid key without admin
// rights gets 403 and is charged nothing: it proved who it is, and charging
// its IP's failed-auth bucket would lock out everyone behind the same NAT.
// Anything else (no key, an unknown or revoked one) costs the caller's IP
// one failed-auth token (401, then 429 once they run out).
func (t *Toll) RefuseAdmin(w http.ResponseWriter, r *http.Request) {
	if _, ok := t.headerKey(r); ok {
		problem.Write(w, r, &problem.Error{Code: problem.Forbidden, Detail: "this API key may not administer fences"})
		return
	}
	caller := Caller{Tier: FailedAuthTier, Identity: "ip:" + bucketIP(t.Proxies.ClientAddr(r))}
	t.refuseKey(w, r, caller, Price{Route: "admin", Zoom: -1})
}
