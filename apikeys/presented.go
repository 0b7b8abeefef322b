package apikeys

import (
	"net/http"
	"strings"
)

// Presented returns the API key a request presents: the X-API-Key header,
// else an "Authorization: Bearer" token, else — when query is true — the
// ?key= parameter, for map clients that cannot set headers (it is redacted
// in logs). Admin calls pass query false: URLs end up in logs and browser
// histories. present is false when there is none; a key longer than
// MaxKeyLength or with characters outside visible ASCII is returned as
// presented but never matches.
func Presented(r *http.Request, query bool) (key string, present bool) {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k, true
	}
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token), true
	}
	if query && r.URL != nil {
		if k := r.URL.Query().Get("key"); k != "" {
			return k, true
		}
	}
	return "", false
}
