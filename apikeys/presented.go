package apikeys

import (
	"net/http"
	"slices"
	"strings"
)

// Presented returns the API key a request presents: the X-API-Key header,
// else an "Authorization: Bearer" token, else — when query is true — the
// ?key= parameter, for map clients that cannot set headers (it is redacted
// in logs). Admin calls pass query false: URLs end up in logs and browser
// histories. present is false when there is none; a key longer than
// MaxKeyLength or with characters outside visible ASCII is returned as
// presented but never matches.
//
// A request that gives a key more than once (see Repeated) presents none.
func Presented(r *http.Request, query bool) (key string, present bool) {
	if Repeated(r, query) != "" {
		return "", false
	}
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k, true
	}
	if a := r.Header.Get("Authorization"); bearer(a) {
		_, token, _ := strings.Cut(a, " ")
		return strings.TrimSpace(token), true
	}
	if query && r.URL != nil {
		if k := r.URL.Query().Get("key"); k != "" {
			return k, true
		}
	}
	return "", false
}

// Repeated names where r gives the key Presented would read more than
// once — X-API-Key sent twice; else, with no X-API-Key, Authorization sent
// twice, a Bearer token among them; else, with neither, when query is
// true, ?key= given twice — or is
// "" when it does not. Such a request presents no key (Presented); whoever
// reads keys refuses it as malformed, so that no two parts of the stack can
// read different keys.
func Repeated(r *http.Request, query bool) string {
	switch vs := r.Header.Values("X-API-Key"); {
	case len(vs) > 1:
		return "X-API-Key"
	case len(vs) == 1 && vs[0] != "":
		return "" // what Presented reads
	}
	switch vs := r.Header.Values("Authorization"); {
	case len(vs) > 1 && slices.ContainsFunc(vs, bearer): // two that are no key (Basic) are none
		return "Authorization"
	case len(vs) == 1 && bearer(vs[0]):
		return "" // what Presented reads
	}
	// The raw query holds "key" unless a name is escaped ("k%65y").
	if query && r.URL != nil && strings.ContainsAny(r.URL.RawQuery, "k%") && len(r.URL.Query()["key"]) > 1 {
		return "key"
	}
	return ""
}

// bearer reports whether an Authorization value is a Bearer token.
func bearer(auth string) bool {
	scheme, _, ok := strings.Cut(auth, " ")
	return ok && strings.EqualFold(scheme, "Bearer")
}
