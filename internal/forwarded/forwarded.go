// Package forwarded decides who a request really comes from, and for which
// host and scheme, when geotoll runs behind reverse proxies.
//
// Forwarding headers (X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto,
// and RFC 7239 Forwarded) are believed only when the socket peer is inside
// a configured trusted CIDR: from anyone else they are client-controlled and
// ignored. Of the two families, only the one the proxies write is read —
// the client address and the host and scheme alike.
//
// The client address is read from ONE header, the one your proxies write
// (X-Forwarded-For by default; Forwarded with WithHeader). Never both: most
// proxies append to X-Forwarded-For and pass a client's own Forwarded header
// through untouched, so preferring whichever is present would let a client
// behind the proxy choose its identity. The chain is walked from the right
// (the entries the trusted proxies wrote) to the first address that is not
// a trusted proxy: that is the client. Entries left of it are the client's
// own text and are never parsed; an unparsable entry right of it — a broken
// proxy chain — falls back to the socket peer, never to a guess.
//
// realclientip-go's RightmostTrustedRangeStrategy walks the chain the same
// way, but gives no address when every hop is a trusted proxy, where this
// package answers the left-most one: an internal client calling through
// the proxies keeps a bucket of its own instead of sharing the last
// proxy's (TestClientAddr "all hops trusted: left-most" fails with it).
package forwarded

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Trusted is a set of proxy networks and the header they write the client
// address into. The zero value trusts nobody.
type Trusted struct {
	prefixes []netip.Prefix
	header   string // "" means X-Forwarded-For
}

// Header names for WithHeader.
const (
	XForwardedFor = "X-Forwarded-For"
	Forwarded     = "Forwarded"
)

// WithHeader returns a copy of t that reads client addresses from header:
// XForwardedFor (the default; hosts and schemes from X-Forwarded-Host and
// X-Forwarded-Proto) or Forwarded (RFC 7239 for=, host= and proto=).
func (t *Trusted) WithHeader(header string) (*Trusted, error) {
	var c Trusted
	if t != nil {
		c = *t
	}
	switch {
	case header == "" || strings.EqualFold(header, XForwardedFor):
		c.header = XForwardedFor
	case strings.EqualFold(header, Forwarded):
		c.header = Forwarded
	default:
		return nil, fmt.Errorf("forwarded header %q must be %s or %s", header, XForwardedFor, Forwarded)
	}
	return &c, nil
}

// ParseTrusted parses CIDRs ("10.0.0.0/8") or single addresses.
func ParseTrusted(cidrs []string) (Trusted, error) {
	var t Trusted
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return Trusted{}, fmt.Errorf("trusted proxy %q: %w", c, err)
			}
			c = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String()
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return Trusted{}, fmt.Errorf("trusted proxy %q: %w", c, err)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// ::ffff:10.0.0.0/104 is 10.0.0.0/8: a peer is matched
			// unmapped (Contains), as a single address is written here.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		t.prefixes = append(t.prefixes, p.Masked())
	}
	return t, nil
}

// New is ParseTrusted returning a pointer; a nil *Trusted trusts nobody.
func New(cidrs []string) (*Trusted, error) {
	t, err := ParseTrusted(cidrs)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Contains reports whether addr is a trusted proxy.
func (t *Trusted) Contains(addr netip.Addr) bool {
	if t == nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range t.prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Peer returns the socket peer's address (invalid if RemoteAddr is not one).
func Peer(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// maxHops bounds how many forwarded addresses are examined.
const maxHops = 32

// ClientAddr returns the address of the client of r: the socket peer, or —
// when the peer is trusted — the right-most address of the configured
// forwarding header that is not a trusted proxy.
func (t *Trusted) ClientAddr(r *http.Request) netip.Addr {
	peer := Peer(r)
	if !peer.IsValid() || !t.Contains(peer) {
		return peer
	}
	parse := parseNode
	header := XForwardedFor
	if t.header == Forwarded {
		header, parse = Forwarded, forwardedNode
	}
	elems := lastElements(r.Header.Values(header), maxHops)
	if len(elems) == 0 {
		return peer
	}
	var leftmost netip.Addr
	for i := len(elems) - 1; i >= 0; i-- {
		a, ok := parse(strings.TrimSpace(elems[i]))
		if !ok {
			return peer // a hop our proxies wrote is broken: trust nothing in it
		}
		if !t.Contains(a) {
			return a
		}
		leftmost = a
	}
	return leftmost // every hop is a trusted proxy: the left-most is the origin
}

// lastElements returns at most n comma-separated elements from the end of
// the header's lines, right-most last.
func lastElements(lines []string, n int) []string {
	var out []string
	for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
		parts := strings.Split(lines[i], ",")
		for j := len(parts) - 1; j >= 0 && len(out) < n; j-- {
			out = append(out, parts[j])
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// forwardedNode reads the for= parameter of one RFC 7239 element.
func forwardedNode(elem string) (netip.Addr, bool) {
	for _, pair := range strings.Split(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
			return parseNode(unquote(strings.TrimSpace(v)))
		}
	}
	return netip.Addr{}, false
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// parseNode parses "1.2.3.4", "1.2.3.4:80", "[2001:db8::1]", "[2001:db8::1]:80"
// or a bare IPv6 address.
func parseNode(s string) (netip.Addr, bool) {
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// HostProto returns the host and scheme the client used: from the request
// itself, or — when the socket peer is trusted — from the header family
// the proxies write (see WithHeader): X-Forwarded-Host / X-Forwarded-Proto
// beside X-Forwarded-For, the host= and proto= of Forwarded beside
// Forwarded. Never the other family: a proxy that writes one passes the
// other through as the client sent it, and the host chosen here is the
// host of the tile URLs TileJSON hands out. Of a list, the right-most
// value (element) is taken: the one our trusted peer wrote. A proxy that
// appends puts its own value last, after anything the client sent, so the
// left-most would be the client's choice.
func (t *Trusted) HostProto(r *http.Request) (host, proto string) {
	host, proto = r.Host, "http"
	if r.TLS != nil {
		proto = "https"
	}
	if !t.Contains(Peer(r)) {
		return host, proto
	}
	if t.header == Forwarded {
		return forwardedHostProto(lastValue(r.Header.Values(Forwarded)), host, proto)
	}
	if h := lastValue(r.Header.Values("X-Forwarded-Host")); validHost(h) {
		host = h
	}
	if p := strings.ToLower(lastValue(r.Header.Values("X-Forwarded-Proto"))); p == "http" || p == "https" {
		proto = p
	}
	return host, proto
}

// HostHeaders names the headers HostProto may read the host and scheme
// from: none when t trusts no proxy (the request's own Host and TLS then
// decide), else the header family of WithHeader. An answer written from
// them varies with them (Vary).
func (t *Trusted) HostHeaders() []string {
	switch {
	case t == nil || len(t.prefixes) == 0:
		return nil
	case t.header == Forwarded:
		return []string{Forwarded}
	}
	return []string{"X-Forwarded-Host", "X-Forwarded-Proto"}
}

// forwardedHostProto reads host= and proto= of one RFC 7239 element; what
// it lacks, or holds invalid, stays host and proto.
func forwardedHostProto(elem, host, proto string) (string, string) {
	for _, pair := range strings.Split(elem, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
		v = unquote(strings.TrimSpace(v))
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "host":
			if validHost(v) {
				host = v
			}
		case "proto":
			if v = strings.ToLower(v); v == "http" || v == "https" {
				proto = v
			}
		}
	}
	return host, proto
}

// lastValue is the right-most comma-separated element over all the lines of
// a header.
func lastValue(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	last := lines[len(lines)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.TrimSpace(last)
}

// ValidHost reports whether h is a host[:port] fit to be written into the
// authority of a URL: see validHost.
func ValidHost(h string) bool { return validHost(h) }

// validHost accepts host[:port] as a URL's authority holds it (RFC 3986
// §3.2.2, §3.2.3), in at most 255 bytes: a name of RFC 3986's unreserved
// characters (letters, digits, "-", ".", "_" and "~": Docker's service
// names hold underscores), an IPv4 address, or an IPv6 address in
// brackets (no zone); then, optionally, ":" and a port from 1 to 65535 in
// at most five digits. Anything else — a port that is not a number
// ("example.com:abc"), an empty port, 0 or above 65535, an unbracketed
// IPv6 address, a percent-encoding, any delimiter — is refused: the host
// is written verbatim into the URLs TileJSON hands out.
func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	host, port := h, ""
	if h[0] == '[' {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		a, err := netip.ParseAddr(h[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		rest := h[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return false
			}
			return validPort(rest[1:])
		}
		return true
	}
	if i := strings.IndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i+1:]
		if !validPort(port) {
			return false
		}
	}
	if host == "" {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '-' || c == '_' || c == '~':
		default:
			return false
		}
	}
	return true
}

// validPort accepts a port number from 1 to 65535 in one to five digits.
func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n >= 1 && n <= 65535
}
