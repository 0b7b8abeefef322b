package negotiate

import (
	"strings"
	"testing"
)

func TestAcceptsGzip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values []string
		want   bool
	}{
		{"absent", nil, false},
		{"empty", []string{""}, false},
		{"gzip", []string{"gzip"}, true},
		{"browser", []string{"gzip, deflate, br, zstd"}, true},
		{"case and spaces", []string{" GZip ;  Q=0.5 "}, true},
		{"x-gzip", []string{"x-gzip"}, true},
		{"q=0 refuses", []string{"gzip;q=0"}, false},
		{"q=0.000 refuses", []string{"gzip;q=0.000"}, false},
		{"q=0.001 accepts", []string{"gzip;q=0.001"}, true},
		{"q=1.000", []string{"gzip;q=1.000"}, true},
		{"q above 1 is malformed", []string{"gzip;q=1.5"}, false},
		{"malformed q", []string{"gzip;q=high"}, false},
		{"other codings only", []string{"br, deflate"}, false},
		{"identity only", []string{"identity"}, false},
		{"star", []string{"*"}, true},
		{"star q=0", []string{"*;q=0"}, false},
		{"explicit refusal beats star", []string{"*, gzip;q=0"}, false},
		{"explicit refusal beats star, other order", []string{"gzip;q=0, *"}, false},
		{"over two header lines", []string{"br", "gzip"}, true},
		{"gzip as a parameter is not gzip", []string{"br;gzip"}, false},
		{"gzipped is not gzip", []string{"gzipped"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AcceptsGzip(tc.values); got != tc.want {
				t.Errorf("AcceptsGzip(%q) = %v, want %v", tc.values, got, tc.want)
			}
		})
	}
}

// TestAccepted: what an Accept-Encoding allows of gzip and identity, and
// which coding a response goes in (RFC 9110 §12.5.3): gzip when identity
// is refused and gzip is acceptable, however little gzip would save;
// without a coding when neither is acceptable.
func TestAccepted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		values         []string
		gzip, identity bool
		// sent: the coding chosen when gzip would not make the response
		// smaller, and when it would.
		sentPlain, sentSmaller string
	}{
		{"absent", nil, false, true, "identity", "identity"},
		{"empty", []string{""}, false, true, "identity", "identity"},
		{"gzip", []string{"gzip"}, true, true, "identity", "gzip"},
		{"identity refused, gzip acceptable", []string{"identity;q=0, gzip"}, true, false, "gzip", "gzip"},
		{"identity refused in another line", []string{"gzip", "identity;q=0"}, true, false, "gzip", "gzip"},
		{"identity refused, star", []string{"identity;q=0, *"}, true, false, "gzip", "gzip"},
		{"star refuses identity", []string{"*;q=0, gzip"}, true, false, "gzip", "gzip"},
		{"star refuses all", []string{"*;q=0"}, false, false, "identity", "identity"},
		{"identity alone refused", []string{"identity;q=0"}, false, false, "identity", "identity"},
		{"identity and gzip refused", []string{"identity;q=0, gzip;q=0, br"}, false, false, "identity", "identity"},
		{"star refused, identity named", []string{"*;q=0, identity"}, false, true, "identity", "identity"},
		{"identity named beats star", []string{"identity;q=0.5, *;q=0"}, false, true, "identity", "identity"},
		{"identity refusal wins over its acceptance", []string{"identity, identity;q=0, gzip"}, true, false, "gzip", "gzip"},
		{"star accepts both", []string{"*"}, true, true, "identity", "gzip"},
		{"malformed q refuses identity", []string{"identity;q=2, gzip"}, true, false, "gzip", "gzip"},
		{"case and spaces", []string{" IDENTITY ; Q=0 , GZip"}, true, false, "gzip", "gzip"},
		{"x-gzip refused", []string{"gzip, x-gzip;q=0, identity;q=0"}, false, false, "identity", "identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Accepted(tc.values)
			if c.Gzip != tc.gzip || c.Identity != tc.identity {
				t.Errorf("Accepted(%q) = %+v, want gzip %v identity %v", tc.values, c, tc.gzip, tc.identity)
			}
			for _, s := range []struct {
				prefer bool
				want   string
			}{{false, tc.sentPlain}, {true, tc.sentSmaller}} {
				got := "identity"
				if c.SendGzip(s.prefer) {
					got = "gzip"
				}
				if got != s.want {
					t.Errorf("Accepted(%q).SendGzip(%v): %s, want %s", tc.values, s.prefer, got, s.want)
				}
			}
		})
	}
}

func TestAcceptsGzipBoundsItsWork(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("br, ", 10000) + "gzip"
	if AcceptsGzip([]string{long}) {
		t.Error("a header of 10001 items was read to the end")
	}
	if c := Accepted([]string{strings.Repeat("br, ", 10000) + "identity;q=0"}); !c.Identity {
		t.Error("a header of 10001 items was read to the end: its last item refused identity")
	}
}

// FuzzAcceptsGzip: any Accept-Encoding is answered without panicking,
// gzip is only chosen when the header names gzip or "*", identity is only
// refused when it names identity or "*", and a response goes in a coding
// the header accepts whenever it accepts one.
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0", "*;q=0.5, gzip;q=0", "br, deflate", "x-gzip;q=0.001", ";;;,,,", "gzip;q=", "*",
		"identity;q=0, gzip", "*;q=0", "*;q=0, identity", "identity;q=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := AcceptsGzip([]string{v})
		lower := strings.ToLower(v)
		if got && !strings.Contains(lower, "gzip") && !strings.Contains(v, "*") {
			t.Fatalf("AcceptsGzip(%q) = true, but it names neither gzip nor *", v)
		}
		// Appending an explicit refusal always refuses.
		if AcceptsGzip([]string{v, "gzip;q=0"}) && strings.Count(v, ",") < MaxHeaderItems-1 {
			t.Fatalf("AcceptsGzip(%q, gzip;q=0) = true", v)
		}
		c := Accepted([]string{v})
		// Identity is refused only by a header that names it or "*".
		if !c.Identity && !strings.Contains(lower, "identity") && !strings.Contains(v, "*") {
			t.Fatalf("Accepted(%q) refuses identity, but the header names neither identity nor *", v)
		}
		// A response goes in a coding the header accepts whenever it
		// accepts one, whether or not gzip pays: gzip when identity is
		// refused, identity when gzip is.
		for _, prefer := range []bool{false, true} {
			gz := c.SendGzip(prefer)
			if gz && !c.Gzip || !gz && !c.Identity && c.Gzip {
				t.Fatalf("Accepted(%q) = %+v, SendGzip(%v) = %v: a coding the header refuses while it accepts the other", v, c, prefer, gz)
			}
		}
		// Accepting identity explicitly after the header never leaves it
		// refused by "*" alone.
		if strings.Count(v, ",") < MaxHeaderItems-1 && !strings.Contains(lower, "identity") &&
			!Accepted([]string{v, "identity"}).Identity {
			t.Fatalf("Accepted(%q, identity) refuses identity", v)
		}
	})
}
