package apikeys_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/geotoll/geotoll/apikeys"
)

// Presented is the one place a request's key is read: headers always, the
// ?key= parameter only when the caller allows it (never for admin calls).
// The server's tests (APIKey, FuzzAPIKey) cover the header rules.
func TestPresented(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header, value, query string
		allowQuery                 bool
		want                       string
		present                    bool
	}{
		{"query allowed", "", "", "key=k1", true, "k1", true},
		{"query refused", "", "", "key=k1", false, "", false},
		{"header without query", "X-API-Key", "k2", "key=q", false, "k2", true},
		{"bearer without query", "Authorization", "Bearer  k3 ", "", false, "k3", true},
		{"other scheme", "Authorization", "Basic k4", "key=q", false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/x?"+tc.query, nil)
			if tc.header != "" {
				r.Header.Set(tc.header, tc.value)
			}
			if got, present := apikeys.Presented(r, tc.allowQuery); got != tc.want || present != tc.present {
				t.Errorf("Presented = %q, %v; want %q, %v", got, present, tc.want, tc.present)
			}
		})
	}
}
