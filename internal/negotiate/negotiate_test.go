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

func TestAcceptsGzipBoundsItsWork(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("br, ", 10000) + "gzip"
	if AcceptsGzip([]string{long}) {
		t.Error("a header of 10001 items was read to the end")
	}
}

// FuzzAcceptsGzip: any Accept-Encoding is answered without panicking, and
// gzip is only chosen when the header names gzip or "*".
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0", "*;q=0.5, gzip;q=0", "br, deflate", "x-gzip;q=0.001", ";;;,,,", "gzip;q=", "*"} {
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
	})
}
