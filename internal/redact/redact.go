// Package redact hides the passwords of URLs in text shown to people:
// configuration errors, log lines.
package redact

import "regexp"

// userinfo matches a URL's user and password up to the last "@" before
// its path: a password holding "@" unencoded (p@ss) is matched whole,
// where net/url and pgx stop at its first "@" and show the rest.
var userinfo = regexp.MustCompile(`(://[^/@:]*):[^/]*@`)

// URL returns s, a URL or text holding URLs, each password replaced by
// "xxxxx" (as url.URL.Redacted writes it). Text that is no URL is
// returned as it is.
func URL(s string) string {
	return userinfo.ReplaceAllString(s, "${1}:xxxxx@")
}
