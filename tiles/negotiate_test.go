package tiles

import (
	"net/http"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/etag"
)

// If-None-Match compares weakly with the ETag of the coding sent: a tile's
// gzip form has a tag of its own. A header that does not parse is refused
// (a 400, before anything is priced: TestConditionalHeadersThatDoNotParse).
func TestNoneMatch(t *testing.T) {
	t.Parallel()
	e := &entry{etag: `"abc"`, data: make([]byte, minGzip)} // big enough to be sent gzipped
	for _, tc := range []struct {
		name   string
		values []string
		gz     bool // the response is sent gzip-coded
		want   bool
		bad    bool
	}{
		{"absent", nil, false, false, false},
		{"identity tag", []string{`"abc"`}, false, true, false},
		{"gzip tag, plain response", []string{`"abc-gz4"`}, false, false, false},
		{"gzip tag, gzip response", []string{`"abc-gz4"`}, true, true, false},
		{"identity tag, gzip response", []string{`"abc"`}, true, false, false},
		{"an earlier compressor's gzip tag", []string{`"abc-gz"`}, true, false, false},
		{"weak tag", []string{`W/"abc"`}, false, true, false},
		{"weak gzip tag, gzip response", []string{`W/"abc-gz4"`}, true, true, false},
		{"star", []string{`*`}, false, true, false},
		{"star, gzip response", []string{`*`}, true, true, false},
		{"list", []string{`"x", "y", "abc"`}, false, true, false},
		{"list over lines", []string{`"x"`, `"abc-gz4"`}, true, true, false},
		{"both codings' tags", []string{`"abc", "abc-gz4"`}, false, true, false},
		{"other", []string{`"abd"`}, false, false, false},
		{"prefix is not a match", []string{`"ab"`}, false, false, false},
		{"comma inside a tag", []string{`"a,b", "abc"`}, false, true, false},
		{"unquoted", []string{`abc`}, false, false, true},
		{"unterminated", []string{`"abc`}, false, false, true},
		{"garbage then tag", []string{`nonsense, "abc"`}, false, false, true},
		{"lowercase weak prefix", []string{`w/"abc"`}, false, false, true},
		{"star among tags", []string{`*, "x"`}, false, false, true},
		{"tags without a comma", []string{`"abc" "x"`}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := etag.ParseConditions(http.Header{"If-None-Match": tc.values})
			if (err != nil) != tc.bad {
				t.Fatalf("ParseConditions(%q): %v, want an error %v", tc.values, err, tc.bad)
			}
			if got := c.NoneMatchFails(e.etagFor(tc.gz)); got != tc.want {
				t.Errorf("If-None-Match %q of a response gzip-coded %v: %v, want %v", tc.values, tc.gz, got, tc.want)
			}
		})
	}
	small := &entry{etag: `"abc"`, data: []byte("x")}
	if c, _ := etag.ParseConditions(http.Header{"If-None-Match": {`"abc-gz4"`}}); c.NoneMatchFails(small.etagFor(false)) {
		t.Error("a tile too small ever to be sent gzipped matched a gzip ETag")
	}
}

func TestNoCache(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header http.Header
		want   bool
	}{
		{"none", http.Header{}, false},
		{"no-cache", http.Header{"Cache-Control": {"no-cache"}}, true},
		{"among others, any case", http.Header{"Cache-Control": {"max-age=0, No-Cache"}}, true},
		{"second header line", http.Header{"Cache-Control": {"max-age=0", "no-cache"}}, true},
		{"max-age=0 alone", http.Header{"Cache-Control": {"max-age=0"}}, false},
		{"no-store is not no-cache", http.Header{"Cache-Control": {"no-store"}}, false},
		{"a field name list is not the directive", http.Header{"Cache-Control": {`no-cache="x"`}}, false},
		{"pragma without cache-control", http.Header{"Pragma": {"no-cache"}}, true},
		{"cache-control wins over pragma", http.Header{"Cache-Control": {"max-age=10"}, "Pragma": {"no-cache"}}, false},
		{"bounded work", http.Header{"Cache-Control": {strings.Repeat("x,", maxHeaderItems) + "no-cache"}}, false},
	} {
		if got := noCache(tc.header); got != tc.want {
			t.Errorf("%s: noCache = %v, want %v", tc.name, got, tc.want)
		}
	}
}
