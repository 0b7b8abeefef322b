package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:p@ssw0rd@host:abc/db", "postgres://u:xxxxx@host:abc/db"},
		{"cannot parse `postgres://u:xxxxx@ssw0rdLEAK@host:abc/db`: invalid port", "cannot parse `postgres://u:xxxxx@host:abc/db`: invalid port"},
		{"http://u:SUPERSECRET11@tiles.example.com", "http://u:xxxxx@tiles.example.com"},
		{"http://user@tiles.example.com", "http://user@tiles.example.com"},
		{"https://tiles.example.com/a:b@c", "https://tiles.example.com/a:b@c"},
		{"redis://:pw@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"no url here", "no url here"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzURL(f *testing.F) {
	f.Add("postgres://u:secret@h/db")
	f.Add("x://a:b@c@d/e")
	f.Fuzz(func(t *testing.T, s string) {
		got := URL(s)
		if URL(got) != got {
			t.Errorf("URL(URL(%q)) = %q, not %q: not stable", s, URL(got), got)
		}
		if i := strings.Index(s, "://"); i >= 0 && strings.Contains(s[i:], ":secretpw@") && strings.Contains(got, "secretpw") {
			t.Errorf("URL(%q) = %q shows the password", s, got)
		}
	})
}
