package tiles

import (
	"net/http"
	"strings"
	"testing"
)

func TestNoneMatch(t *testing.T) {
	t.Parallel()
	e := &entry{etag: `"abc"`, data: make([]byte, minGzip)} // big enough to be sent gzipped
	for _, tc := range []struct {
		name   string
		values []string
		want   bool
	}{
		{"absent", nil, false},
		{"identity tag", []string{`"abc"`}, true},
		{"gzip tag", []string{`"abc-gz4"`}, true},
		{"an earlier compressor's gzip tag", []string{`"abc-gz"`}, false},
		{"weak tag", []string{`W/"abc"`}, true},
		{"star", []string{`*`}, true},
		{"list", []string{`"x", "y", "abc"`}, true},
		{"list over lines", []string{`"x"`, `"abc-gz4"`}, true},
		{"other", []string{`"abd"`}, false},
		{"unquoted", []string{`abc`}, false},
		{"prefix is not a match", []string{`"ab"`}, false},
		{"comma inside a tag", []string{`"a,b", "abc"`}, true},
		{"unterminated", []string{`"abc`}, false},
		{"garbage then tag", []string{`nonsense, "abc"`}, true},
		{"lowercase weak prefix is not weak", []string{`w/"abc"`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := noneMatch(tc.values, e.matches); got != tc.want {
				t.Errorf("noneMatch(%q) = %v, want %v", tc.values, got, tc.want)
			}
		})
	}
	small := &entry{etag: `"abc"`, data: []byte("x")}
	if noneMatch([]string{`"abc-gz4"`}, small.matches) {
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

// FuzzNoneMatch: any If-None-Match is answered without panicking, and a
// match is only reported for "*" or a header that holds the tag.
func FuzzNoneMatch(f *testing.F) {
	for _, s := range []string{`"abc"`, `W/"abc"`, `*`, `"a", "b"`, `"abc`, `,,"`, `W/`, `"a,b"`} {
		f.Add(s)
	}
	e := &entry{etag: `"abc"`, data: make([]byte, minGzip)} // big enough to be sent gzipped
	f.Fuzz(func(t *testing.T, v string) {
		got := noneMatch([]string{v}, e.matches)
		if got && !strings.Contains(v, "*") && !strings.Contains(v, `"abc"`) && !strings.Contains(v, `"abc-gz4"`) {
			t.Fatalf("noneMatch(%q) = true, but the header holds neither * nor the tag", v)
		}
		for _, tag := range splitETags(v) {
			if tag != "*" && !strings.HasSuffix(tag, `"`) {
				t.Fatalf("splitETags(%q) gave %q, not an entity tag", v, tag)
			}
		}
	})
}
