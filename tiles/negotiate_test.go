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
		gz     bool // the response is sent gzip-coded
		want   bool
	}{
		{"absent", nil, false, false},
		{"identity tag", []string{`"abc"`}, false, true},
		{"gzip tag, plain response", []string{`"abc-gz4"`}, false, false},
		{"gzip tag, gzip response", []string{`"abc-gz4"`}, true, true},
		{"identity tag, gzip response", []string{`"abc"`}, true, false},
		{"an earlier compressor's gzip tag", []string{`"abc-gz"`}, true, false},
		{"weak tag", []string{`W/"abc"`}, false, true},
		{"weak gzip tag, gzip response", []string{`W/"abc-gz4"`}, true, true},
		{"star", []string{`*`}, false, true},
		{"star, gzip response", []string{`*`}, true, true},
		{"list", []string{`"x", "y", "abc"`}, false, true},
		{"list over lines", []string{`"x"`, `"abc-gz4"`}, true, true},
		{"both codings' tags", []string{`"abc", "abc-gz4"`}, false, true},
		{"other", []string{`"abd"`}, false, false},
		{"unquoted", []string{`abc`}, false, false},
		{"prefix is not a match", []string{`"ab"`}, false, false},
		{"comma inside a tag", []string{`"a,b", "abc"`}, false, true},
		{"unterminated", []string{`"abc`}, false, false},
		{"garbage then tag", []string{`nonsense, "abc"`}, false, true},
		{"lowercase weak prefix is not weak", []string{`w/"abc"`}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := noneMatch(tc.values, e.matches(tc.gz)); got != tc.want {
				t.Errorf("noneMatch(%q) of a response gzip-coded %v = %v, want %v", tc.values, tc.gz, got, tc.want)
			}
		})
	}
	small := &entry{etag: `"abc"`, data: []byte("x")}
	if noneMatch([]string{`"abc-gz4"`}, small.matches(false)) {
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
		if noneMatch([]string{v}, e.matches(false)) && !strings.Contains(v, "*") && !strings.Contains(v, `"abc"`) {
			t.Fatalf("noneMatch(%q) = true for the plain tile, but the header holds neither * nor its tag", v)
		}
		if noneMatch([]string{v}, e.matches(true)) && !strings.Contains(v, "*") && !strings.Contains(v, `"abc-gz4"`) {
			t.Fatalf("noneMatch(%q) = true for the gzip tile, but the header holds neither * nor its tag", v)
		}
		for _, tag := range splitETags(v) {
			if tag != "*" && !strings.HasSuffix(tag, `"`) {
				t.Fatalf("splitETags(%q) gave %q, not an entity tag", v, tag)
			}
		}
	})
}
