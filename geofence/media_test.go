package geofence

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A check or fence body labelled with a media type other than JSON — a
// form, text, multipart, XML, an image, JSON in another charset, a
// Content-Type that does not parse — is a 415 naming Content-Type and the
// types read (with Accept-Post on a POST), from the request's head: not
// read, priced, written, nor, on the check, its key checked (a bad key
// would cost a failed-auth token). JSON is read under any
// application/*+json type and with a charset of utf-8, and a body without
// a Content-Type is read as JSON. Any media type used to be read as JSON.
func TestBodyMediaTypeMustBeJSON(t *testing.T) {
	reader, writes := &fakeReader{}, 0
	gate := &authGate{fakeGate: fakeGate{budget: 100}}
	r := writingRouter(t, reader, gate, &writes)
	const check = `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`
	fence := `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]},"properties":{"name":"x"}}`
	routes := []struct{ method, target, body, key string }{
		{http.MethodPost, "/geofence/check", check, "bad"},
		{http.MethodPost, "/geofence/check?layer=places", check, "bad"},
		{http.MethodPost, FencesPath, fence, testAdminKey},
		{http.MethodPut, FencesPath + "/7", fence, testAdminKey},
	}
	for _, ct := range []string{
		"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "image/png",
		"application/xml", "application/json; charset=iso-8859-1", "application/+json", "json",
	} {
		for _, rt := range routes {
			w := serve(r, rt.method, rt.target, rt.body, "Content-Type", ct, "X-API-Key", rt.key)
			if w.Code != http.StatusUnsupportedMediaType {
				t.Errorf("%s %s as %q: %d %.200s, want 415", rt.method, rt.target, ct, w.Code, w.Body)
				continue
			}
			doc := problemDoc(t, w)
			if detail := fmt.Sprint(doc["detail"]); doc["param"] != "Content-Type" ||
				!strings.Contains(detail, "application/json") || !strings.Contains(detail, "application/geo+json") {
				t.Errorf("%s %s as %q: problem %v, want one naming Content-Type and the types read", rt.method, rt.target, ct, doc)
			}
			if got, want := w.Header().Get("Accept-Post"), map[bool]string{true: "application/json, application/geo+json"}[rt.method == http.MethodPost]; got != want {
				t.Errorf("%s %s as %q: Accept-Post %q, want %q", rt.method, rt.target, ct, got, want)
			}
		}
	}
	if len(gate.demands) != 0 || gate.asked != 0 || len(reader.calls) != 0 || writes != 0 {
		t.Errorf("bodies of other media types were priced (%v), authenticated (%d), queried (%v) or written (%d)", gate.demands, gate.asked, reader.calls, writes)
	}
	for _, ct := range []string{
		"", "application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8",
		"application/geo+json", "application/vnd.geo+json", "application/merge-patch+json",
	} {
		for _, rt := range routes {
			hdr := []string{"X-API-Key", testAdminKey}
			if ct != "" {
				hdr = append(hdr, "Content-Type", ct)
			}
			// places has no storage read: its check is a 503 once the body is read.
			want := map[bool]int{false: http.StatusOK, true: http.StatusServiceUnavailable}[strings.Contains(rt.target, "layer")]
			if w := serve(r, rt.method, rt.target, rt.body, hdr...); w.Code != want && w.Code != http.StatusCreated {
				t.Errorf("%s %s as %q: %d %.200s, want it read", rt.method, rt.target, ct, w.Code, w.Body)
			}
		}
	}
}
