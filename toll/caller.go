package toll

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/throttle"
)

// IPv6Aggregate is a second bucket that every anonymous IPv6 caller pays
// besides its own /64: one per /Bits network (a /48 holds 65,536 /64s, so
// without it one site could spend 65,536 anonymous budgets).
type IPv6Aggregate struct {
	Bits  int // the aggregate's prefix length, 16..63; 0 turns it off
	Limit throttle.Limit
}

// validate checks that the aggregate can pay the dearest request.
func (a IPv6Aggregate) validate(maxCost float64) error {
	if a.Bits == 0 {
		return nil
	}
	if a.Bits < 16 || a.Bits > 63 {
		return fmt.Errorf("ipv6 aggregate: prefix /%d must be within /16../63", a.Bits)
	}
	if err := a.Limit.Validate(); err != nil {
		return fmt.Errorf("ipv6 aggregate: %w", err)
	}
	if a.Limit.Capacity <= maxCost {
		return fmt.Errorf("ipv6 aggregate: capacity %g must be above the largest price %g", a.Limit.Capacity, maxCost)
	}
	return nil
}

// policy names the aggregate in refusals ("anonymous-ipv6-/48").
func (a IPv6Aggregate) policy(tier string) string { return fmt.Sprintf("%s-ipv6-/%d", tier, a.Bits) }

// KeyLookup finds an active API key; *apikeys.Ring is the production one.
type KeyLookup interface {
	Lookup(key string) (apikeys.Key, bool)
}

// rechecker is a KeyLookup that can look a key it did not find up once
// more after a fresh reload (apikeys.Ring.Recheck), so that a key created
// a moment ago works on its first request.
type rechecker interface {
	Recheck(ctx context.Context, key string) (apikeys.Key, bool)
}

var _ rechecker = (*apikeys.Ring)(nil)

// lookup finds key in t.Keys, rechecking a key it does not find when the
// lookup can.
func (t *Toll) lookup(ctx context.Context, key string) (apikeys.Key, bool) {
	if t.Keys == nil {
		return apikeys.Key{}, false
	}
	if k, ok := t.Keys.Lookup(key); ok {
		return k, true
	}
	if rc, ok := t.Keys.(rechecker); ok {
		return rc.Recheck(ctx, key)
	}
	return apikeys.Key{}, false
}

// AnonymousTier is the tier of callers without an API key, bucketed per
// client IP. FailedAuthTier buckets presented-but-unknown keys per client
// IP, so guessing keys ends in 429.
const (
	AnonymousTier  = "anonymous"
	FailedAuthTier = "failed-auth"
)

// Caller is who pays for a request.
type Caller struct {
	Tier     string // name of the tier whose limit applies
	Identity string // stable, non-secret bucket identity ("k:<id>" or "ip:<addr>")
	// Network, for an anonymous IPv6 caller when Toll.IPv6Aggregate is on,
	// is the identity of its aggregate ("ip:2001:db8:1::/48"): the caller
	// also pays that bucket, and its own bucket shares the aggregate's
	// hash tag (see bucketKey).
	Network string
	KeyName string // the API key's name, if any
	Admin   bool
}

// bucketKey is the key of the caller's own bucket: throttle.BucketKey of
// its tier and identity, or — for a caller in an IPv6 aggregate — the
// aggregate's bucket key followed by ":" and the caller's identity:
//
//	geotoll:{anonymous:ip:192.0.2.7}
//	geotoll:{anonymous:ip:2001:db8:1::/48}                        the /48 aggregate
//	geotoll:{anonymous:ip:2001:db8:1::/48}:ip:2001:db8:1:2::/64   a /64 in it
//
// Both IPv6 keys (and the /64's open requests and tombstones,
// throttle.OpenKey and throttle.VoidKey) carry the /48's hash tag, so
// Redis Cluster keeps them in one slot and one script may touch them
// together.
func (c Caller) bucketKey(prefix string) string {
	if c.Network == "" {
		return throttle.BucketKey(prefix, c.Tier, c.Identity)
	}
	return throttle.BucketKey(prefix, c.Tier, c.Network) + ":" + c.Identity
}

// APIKey returns the key a request presents, ?key= included (see
// apikeys.Presented).
func APIKey(r *http.Request) (key string, present bool) { return apikeys.Presented(r, true) }

// identify names the caller. ok is false when the request presents a key
// that is unknown or revoked; the caller is then its client address in the
// failed-auth tier, and no bucket is ever made for the key itself.
func (t *Toll) identify(r *http.Request) (c Caller, ok bool) {
	defer func() { note(r.Context(), c) }()
	key, present := APIKey(r)
	if !present {
		addr := t.Proxies.ClientAddr(r)
		return Caller{Tier: AnonymousTier, Identity: "ip:" + bucketIP(addr), Network: t.network(addr)}, true
	}
	if t.Keys != nil {
		if k, found := t.Keys.Lookup(key); found {
			return keyCaller(k), true
		}
	}
	failed := t.failedAuthCaller(r)
	// A client whose guesses its failed-auth bucket already refuses is
	// refused again without the reload of the keys a recheck asks for.
	if t.refusedFree(failed) {
		return failed, false
	}
	if k, found := t.lookup(r.Context(), key); found {
		return keyCaller(k), true
	}
	return failed, false
}

func keyCaller(k apikeys.Key) Caller {
	return Caller{Tier: k.Tier, Identity: "k:" + strconv.FormatInt(k.ID, 10), KeyName: k.Name, Admin: k.Admin}
}

// refusedFree reports whether the store refuses c's failed-auth token in
// process, without a call (throttle.Failover.RefusesFree).
func (t *Toll) refusedFree(c Caller) bool {
	f, ok := t.Store.(interface {
		RefusesFree(throttle.Bucket, float64) (throttle.Result, bool)
	})
	if !ok {
		return false
	}
	_, refused := f.RefusesFree(throttle.Bucket{Key: c.bucketKey(t.Prefix), Limit: t.FailedAuth}, 1)
	return refused
}

// failedAuthCaller is who pays for a presented key that is unknown: the
// client address, or the whole IPv6 aggregate when that is on (a /48 holds
// 65,536 /64s: guessing keys from all of them must not multiply the
// failed-auth budget).
func (t *Toll) failedAuthCaller(r *http.Request) Caller {
	addr := t.Proxies.ClientAddr(r)
	if n := t.network(addr); n != "" {
		return Caller{Tier: FailedAuthTier, Identity: n}
	}
	return Caller{Tier: FailedAuthTier, Identity: "ip:" + bucketIP(addr)}
}

// bucketIP is the bucket identity of a client address: the IPv4 address, or
// the /64 of an IPv6 address (one subscriber usually holds a whole /64). A
// 6to4 (2002::/16) or Teredo (2001::/32) address is the IPv4 client it
// embeds: otherwise one IPv4 address would hold 65,536 /64s (6to4) or pick
// a new bucket with every Teredo port.
func bucketIP(addr netip.Addr) string {
	if !addr.IsValid() {
		return "unknown"
	}
	if v4, ok := embeddedIPv4(addr); ok {
		return v4.String()
	}
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// embeddedIPv4 returns the IPv4 client address a 6to4 or Teredo address
// carries.
func embeddedIPv4(addr netip.Addr) (netip.Addr, bool) {
	if !addr.Is6() || addr.Is4In6() {
		return netip.Addr{}, false
	}
	b := addr.As16()
	switch {
	case b[0] == 0x20 && b[1] == 0x02: // 6to4: 2002:AABB:CCDD::/48 is A.B.C.D's
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo: the client, bit-inverted, in the last 32 bits
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// network is the aggregate identity of an anonymous IPv6 client ("ip:" and
// its /IPv6Aggregate.Bits prefix), or "" when aggregates are off or the
// client is IPv4 (including an IPv4 client behind 6to4 or Teredo).
func (t *Toll) network(addr netip.Addr) string {
	bits := t.IPv6Aggregate.Bits
	if bits <= 0 || !addr.IsValid() || !addr.Is6() || addr.Is4In6() {
		return ""
	}
	if _, ok := embeddedIPv4(addr); ok {
		return ""
	}
	p, _ := addr.Prefix(bits)
	return "ip:" + p.String()
}

// compile-time check: the ring is a KeyLookup.
var _ KeyLookup = (*apikeys.Ring)(nil)
