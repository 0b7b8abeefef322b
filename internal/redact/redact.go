// Package redact hides the passwords of URLs in text shown to people:
// configuration errors, log lines.
package redact

import "regexp"

// userinfo matches a URL's user and password: from its "scheme://" to
// the last "@" of the same word (no space, quote or backtick between), a
// password holding "@" or "/" unencoded (p@ss, pa/ss) matched whole where
// net/url and pgx stop at its first "@" or "/" and show the rest. A "?"
// or "#" ends the match: what follows is a query or a fragment, whose "@"
// (?to=ops@example.com) is no password's end.
var userinfo = regexp.MustCompile("(://[^/@:?#\\s\"'`]*):[^?#\\s\"'`]*@")

// URL returns s, a URL or text holding URLs, each password replaced by
// "xxxxx" (as url.URL.Redacted writes it). Text that is no URL is
// returned as it is.
func URL(s string) string {
	return userinfo.ReplaceAllString(s, "${1}:xxxxx@")
}
