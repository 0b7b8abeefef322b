package etag

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/problem"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		any    bool
		tags   []string
		bad    bool
	}{
		{name: "one", values: []string{`"7"`}, tags: []string{`"7"`}},
		{name: "weak", values: []string{`W/"7"`}, tags: []string{`W/"7"`}},
		{name: "any", values: []string{`*`}, any: true},
		{name: "any with spaces", values: []string{" * "}, any: true},
		{name: "a list", values: []string{`"1", W/"2" ,"3"`}, tags: []string{`"1"`, `W/"2"`, `"3"`}},
		{name: "across lines", values: []string{`"1"`, `"2"`}, tags: []string{`"1"`, `"2"`}},
		{name: "empty elements", values: []string{`,"1",, ,"2",`}, tags: []string{`"1"`, `"2"`}},
		{name: "tabs", values: []string{"\t\"1\"\t,\t\"2\""}, tags: []string{`"1"`, `"2"`}},
		{name: "a comma inside a tag", values: []string{`"a,b"`}, tags: []string{`"a,b"`}},
		{name: "an empty tag", values: []string{`""`}, tags: []string{`""`}},
		{name: "obs-text", values: []string{"\"\xe2\x98\x83\""}, tags: []string{"\"\xe2\x98\x83\""}},
		{name: "no element", values: []string{""}},
		{name: "only commas", values: []string{" , ,"}},
		{name: "unquoted", values: []string{`7`}, bad: true},
		{name: "unterminated", values: []string{`"7`}, bad: true},
		{name: "lower-case weak", values: []string{`w/"7"`}, bad: true},
		{name: "weak without a tag", values: []string{`W/`}, bad: true},
		{name: "space after W/", values: []string{`W/ "7"`}, bad: true},
		{name: "two tags without a comma", values: []string{`"1" "2"`}, bad: true},
		{name: "text after a tag", values: []string{`"1"x`}, bad: true},
		{name: "a space inside", values: []string{`"a b"`}, bad: true},
		{name: "a control inside", values: []string{"\"a\x01\""}, bad: true},
		{name: "any among tags", values: []string{`*, "1"`}, bad: true},
		{name: "any on another line", values: []string{`"1"`, `*`}, bad: true},
		{name: "any twice", values: []string{`*, *`}, bad: true},
		{name: "weak any", values: []string{`W/*`}, bad: true},
		{name: "too many", values: []string{strings.Repeat(`"x",`, MaxTags+1)}, bad: true},
		{name: "as many as allowed", values: []string{strings.Repeat(`"x",`, MaxTags)}, tags: slices.Repeat([]string{`"x"`}, MaxTags)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse(tc.values)
			if tc.bad {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want an error", tc.values, l)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.values, err)
			}
			if l.Any != tc.any || !slices.Equal(l.tags, tc.tags) {
				t.Errorf("Parse(%q) = any %v tags %q, want any %v tags %q", tc.values, l.Any, l.tags, tc.any, tc.tags)
			}
		})
	}
}

// Strong comparison (If-Match) takes only a strong tag equal to the
// current one; weak comparison (If-None-Match) takes either, weak or not.
func TestETagComparison(t *testing.T) {
	const current = `"7"`
	for _, tc := range []struct {
		value        string
		strong, weak bool
	}{
		{`"7"`, true, true},
		{`W/"7"`, false, true},
		{`"8"`, false, false},
		{`"1", "7"`, true, true},
		{`W/"1", W/"7"`, false, true},
		{`*`, true, true},
		{`"07"`, false, false},
		{`"77"`, false, false},
		{``, false, false},
	} {
		l, err := Parse([]string{tc.value})
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.value, err)
		}
		if got := l.MatchStrong(current); got != tc.strong {
			t.Errorf("%q strongly matches %s: %v, want %v", tc.value, current, got, tc.strong)
		}
		if got := l.MatchWeak(current); got != tc.weak {
			t.Errorf("%q weakly matches %s: %v, want %v", tc.value, current, got, tc.weak)
		}
	}
}

func TestParseConditions(t *testing.T) {
	const current = `"7"`
	for _, tc := range []struct {
		name   string
		header http.Header
		failed string // the header whose condition is false at current
		param  string // a 400 naming it
	}{
		{name: "none", header: http.Header{}},
		{name: "if-match holds", header: http.Header{"If-Match": {current}}},
		{name: "if-match fails", header: http.Header{"If-Match": {`"6"`}}, failed: "If-Match"},
		{name: "if-match weak fails", header: http.Header{"If-Match": {`W/"7"`}}, failed: "If-Match"},
		{name: "if-match empty fails", header: http.Header{"If-Match": {""}}, failed: "If-Match"},
		{name: "if-none-match holds", header: http.Header{"If-None-Match": {`"6"`}}},
		{name: "if-none-match empty holds", header: http.Header{"If-None-Match": {""}}},
		{name: "if-none-match fails", header: http.Header{"If-None-Match": {`W/"7"`}}, failed: "If-None-Match"},
		{name: "if-none-match any fails", header: http.Header{"If-None-Match": {"*"}}, failed: "If-None-Match"},
		{name: "if-match first", header: http.Header{"If-Match": {`"6"`}, "If-None-Match": {"*"}}, failed: "If-Match"},
		{name: "both hold", header: http.Header{"If-Match": {current}, "If-None-Match": {`"6"`}}},
		{name: "if-match malformed", header: http.Header{"If-Match": {"7"}}, param: "If-Match"},
		{name: "if-none-match malformed", header: http.Header{"If-None-Match": {`"7`}}, param: "If-None-Match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseConditions(tc.header)
			if tc.param != "" {
				var e *problem.Error
				if !errors.As(err, &e) || e.Code != problem.Invalid || e.Param != tc.param {
					t.Fatalf("ParseConditions: %v, want a 400 naming %s", err, tc.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Failed(current); got != tc.failed {
				t.Errorf("Failed(%s) = %q, want %q", current, got, tc.failed)
			}
			if p.None() != (len(tc.header) == 0) {
				t.Errorf("None() = %v with %v", p.None(), tc.header)
			}
		})
	}
}

// FuzzParse: any header value parses or is refused without
// panicking; what parses is "*" alone or entity tags, each as sent in the
// value, which parse again as themselves; a strong match is of a strong tag
// the value holds.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`"7"`, `W/"7"`, `*`, `"1", W/"2" ,"3"`, `"7`, `,,`, `W/`, `"a,b"`, `*, "1"`, "\"\xff\"", `""`, " \t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		l, err := Parse([]string{v})
		if err != nil {
			return
		}
		if l.Any && len(l.tags) > 0 {
			t.Fatalf("Parse(%q): * with tags %q", v, l.tags)
		}
		if len(l.tags) > MaxTags {
			t.Fatalf("Parse(%q): %d tags, more than %d", v, len(l.tags), MaxTags)
		}
		for _, tag := range l.tags {
			if !strings.Contains(v, tag) || !strings.HasSuffix(tag, `"`) || !strings.HasPrefix(strings.TrimPrefix(tag, "W/"), `"`) || len(strings.TrimPrefix(tag, "W/")) < 2 {
				t.Fatalf("Parse(%q) gave %q, not an entity tag of the value", v, tag)
			}
			again, err := Parse([]string{tag})
			if err != nil || again.Any || !slices.Equal(again.tags, []string{tag}) {
				t.Fatalf("the tag %q of %q parses as %+v, %v", tag, v, again, err)
			}
			if strings.HasPrefix(tag, "W/") {
				if l2 := (List{tags: []string{tag}}); l2.MatchStrong(tag) || l2.MatchStrong(strings.TrimPrefix(tag, "W/")) {
					t.Fatalf("the weak tag %q matches strongly", tag)
				}
			} else if !l.MatchStrong(tag) || !l.MatchWeak("W/"+tag) {
				t.Fatalf("%q does not match its own tag %q", v, tag)
			}
		}
		if !l.Any && l.MatchStrong(`"fuzz"`) && !strings.Contains(v, `"fuzz"`) {
			t.Fatalf("%q strongly matches a tag it does not hold", v)
		}
	})
}
