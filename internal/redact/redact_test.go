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
		{"http://u:pa/SECRETX@tiles.example.com", "http://u:xxxxx@tiles.example.com"},
		{`"http://u:pa/SECRETX@tiles.example.com" must be`, `"http://u:xxxxx@tiles.example.com" must be`},
		{"http://user@tiles.example.com", "http://user@tiles.example.com"},
		{"http://tiles.example.com:8443?to=ops@example.com", "http://tiles.example.com:8443?to=ops@example.com"},
		{"http://[::1]:80?a@b", "http://[::1]:80?a@b"},
		{"redis://:pw@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"a://u:p@h/x and b://v:q@k/y", "a://u:xxxxx@h/x and b://v:xxxxx@k/y"},
		{"no url here", "no url here"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzURL: redacting is stable, and a password — the text between the
// first ":" after "scheme://" and the last "@" of the URL, with no space,
// quote, "?" or "#" in between — never shows.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"postgres://u:secretpw@h/db", "x://u:pa/secretpw@h", "x://u:p@secretpw@h:1", "x://a:b@c@d/e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := URL(s)
		if URL(got) != got {
			t.Errorf("URL(URL(%q)) = %q, not %q: not stable", s, URL(got), got)
		}
		if pw, ok := password(s); ok && len(pw) >= 4 && strings.Contains(got, pw) && !strings.Contains(strings.Replace(s, pw, "", 1), pw) {
			t.Errorf("URL(%q) = %q shows the password %q", s, got, pw)
		}
	})
}

// password returns the password of s when s is one URL of the form
// scheme://user:password@host… as the fuzz test reads it.
func password(s string) (string, bool) {
	i := strings.Index(s, "://")
	if i < 0 || strings.ContainsAny(s, " \t\n\f\r\"'`?#") {
		return "", false
	}
	rest := s[i+3:]
	at := strings.LastIndex(rest, "@")
	colon := strings.Index(rest, ":")
	if at < 0 || colon < 0 || colon > at || strings.Contains(rest[:colon], "/") || strings.Contains(rest[:colon], "@") {
		return "", false
	}
	return rest[colon+1 : at], true
}
