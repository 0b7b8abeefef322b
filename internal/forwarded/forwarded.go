// Package forwarded decides who a request really comes from, and for which
// host and scheme, when geotoll runs behind reverse proxies.
//
// Forwarding headers (X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto,
// and RFC 7239 Forwarded) are believed only when the socket peer is inside
// a configured trusted CIDR: from anyone else they are client-controlled and
// ignored. Behind a chain of proxies the client is the right-most address
// that is not itself a trusted proxy. A malformed header falls back to the
// socket peer — never to a guess.
package forwarded

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Trusted is a set of proxy networks. The zero value trusts nobody.
type Trusted struct{ prefixes []netip.Prefix }

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
// when the peer is trusted — the right-most address in the forwarding chain
// that is not a trusted proxy. Forwarded (RFC 7239) is preferred over
// X-Forwarded-For when both are present.
func (t *Trusted) ClientAddr(r *http.Request) netip.Addr {
	peer := Peer(r)
	if !peer.IsValid() || !t.Contains(peer) {
		return peer
	}
	var chain []netip.Addr
	var ok bool
	if fw := r.Header.Values("Forwarded"); len(fw) > 0 {
		chain, ok = forwardedFor(fw)
	} else if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		chain, ok = xForwardedFor(xff)
	} else {
		return peer
	}
	if !ok {
		return peer
	}
	for i := len(chain) - 1; i >= 0; i-- {
		if !t.Contains(chain[i]) {
			return chain[i]
		}
	}
	if len(chain) > 0 {
		return chain[0] // every hop is trusted: the left-most is the origin
	}
	return peer
}

// xForwardedFor parses "a, b, c" (possibly over several header lines).
func xForwardedFor(values []string) ([]netip.Addr, bool) {
	var out []netip.Addr
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			if len(out) >= maxHops {
				return nil, false
			}
			a, ok := parseNode(strings.TrimSpace(part))
			if !ok {
				return nil, false
			}
			out = append(out, a)
		}
	}
	return out, len(out) > 0
}

// forwardedFor parses the for= parameters of RFC 7239 Forwarded elements.
func forwardedFor(values []string) ([]netip.Addr, bool) {
	var out []netip.Addr
	for _, v := range values {
		for _, elem := range strings.Split(v, ",") {
			if len(out) >= maxHops {
				return nil, false
			}
			found := false
			for _, pair := range strings.Split(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok {
					return nil, false
				}
				if !strings.EqualFold(k, "for") {
					continue
				}
				a, ok := parseNode(unquote(val))
				if !ok {
					return nil, false
				}
				out = append(out, a)
				found = true
			}
			if !found {
				return nil, false
			}
		}
	}
	return out, len(out) > 0
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
// itself, or — when the socket peer is trusted — from Forwarded or
// X-Forwarded-Host / X-Forwarded-Proto. Of a list, the right-most value is
// taken: the one our trusted peer wrote. A proxy that appends puts its own
// value last, after anything the client sent, so the left-most would be the
// client's choice.
func (t *Trusted) HostProto(r *http.Request) (host, proto string) {
	host, proto = r.Host, "http"
	if r.TLS != nil {
		proto = "https"
	}
	if !t.Contains(Peer(r)) {
		return host, proto
	}
	if h := lastValue(r.Header.Values("X-Forwarded-Host")); validHost(h) {
		host = h
	}
	if p := strings.ToLower(lastValue(r.Header.Values("X-Forwarded-Proto"))); p == "http" || p == "https" {
		proto = p
	}
	if fw := lastValue(r.Header.Values("Forwarded")); fw != "" {
		for _, pair := range strings.Split(fw, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
			v = unquote(v)
			switch strings.ToLower(k) {
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

// validHost accepts host[:port] made of the characters a host may have.
func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '-' || c == ':' || c == '[' || c == ']':
		default:
			return false
		}
	}
	return true
}
