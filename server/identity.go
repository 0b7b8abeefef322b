package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
)

// Caller is who pays for a request.
type Caller struct {
	Tier     string // name of the tier whose limit applies
	Identity string // stable, non-secret bucket identity ("k:<hash>" or "ip:<addr>")
}

// identify names the caller. An API key (X-API-Key) is hashed, so raw keys
// never reach Redis or the logs; without one the caller is its client IP,
// with IPv6 grouped by /64 (one subscriber usually holds a whole /64).
func identify(r *http.Request, keyedTier, anonymousTier string) Caller {
	if key := r.Header.Get("X-API-Key"); key != "" {
		sum := sha256.Sum256([]byte(key))
		return Caller{Tier: keyedTier, Identity: "k:" + hex.EncodeToString(sum[:16])}
	}
	return Caller{Tier: anonymousTier, Identity: "ip:" + clientIP(r.RemoteAddr)}
}

// clientIP returns the bucket identity of a socket address: the IPv4 address,
// or the /64 prefix of an IPv6 address.
func clientIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "unknown"
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}
