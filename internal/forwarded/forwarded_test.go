package forwarded

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode"
)

func req(remote string, hdr ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://geotoll.local/x", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestClientAddr(t *testing.T) {
	trusted, err := New([]string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want string
	}{
		{"no proxy", req("203.0.113.9:1234"), "203.0.113.9"},
		{"spoofed XFF from an untrusted peer is ignored", req("203.0.113.9:1234", "X-Forwarded-For", "1.1.1.1"), "203.0.113.9"},
		{"trusted proxy", req("10.1.2.3:80", "X-Forwarded-For", "198.51.100.7"), "198.51.100.7"},
		{"chain: right-most untrusted", req("10.1.2.3:80", "X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.9.9.9"), "198.51.100.7"},
		{"chain over two header lines", req("10.1.2.3:80", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.7"), "198.51.100.7"},
		{"all hops trusted: left-most", req("10.1.2.3:80", "X-Forwarded-For", "10.0.0.1, 10.0.0.2"), "10.0.0.1"},
		{"malformed XFF falls back to the peer", req("10.1.2.3:80", "X-Forwarded-For", "198.51.100.7, nonsense"), "10.1.2.3"},
		{"empty XFF falls back", req("10.1.2.3:80", "X-Forwarded-For", ""), "10.1.2.3"},
		{"XFF with ports", req("10.1.2.3:80", "X-Forwarded-For", "198.51.100.7:5555"), "198.51.100.7"},
		{"IPv6 XFF", req("10.1.2.3:80", "X-Forwarded-For", "[2001:db8:1::5]:443"), "2001:db8:1::5"},
		{"trusted IPv6 proxy", req("[2001:db8:ffff::1]:80", "X-Forwarded-For", "2001:db8:2::9"), "2001:db8:2::9"},
		{"single trusted address", req("192.0.2.1:80", "X-Forwarded-For", "198.51.100.8"), "198.51.100.8"},
		{"a client's own Forwarded header is ignored", req("10.1.2.3:80", "Forwarded", "for=198.51.100.77", "X-Forwarded-For", "6.6.6.6"), "6.6.6.6"},
		{"garbage left of the client is never parsed", req("10.1.2.3:80", "X-Forwarded-For", "garbage, 203.0.113.9"), "203.0.113.9"},
		{"a long client-written prefix does not matter", req("10.1.2.3:80", "X-Forwarded-For", strings.Repeat("1.1.1.1, ", 100)+"203.0.113.9"), "203.0.113.9"},
		{"v4-mapped peer", req("[::ffff:203.0.113.9]:1"), "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := trusted.ClientAddr(tc.r).String(); got != tc.want {
				t.Errorf("ClientAddr = %s, want %s", got, tc.want)
			}
		})
	}
}

// A trusted proxy written as an IPv4-mapped prefix is the IPv4 prefix it
// maps: it was kept as an IPv6 prefix, which a peer (matched unmapped)
// never fell in, and every client was the proxy.
func TestTrustedIPv4MappedPrefix(t *testing.T) {
	for _, cidr := range []string{"::ffff:10.0.0.0/104", "::ffff:10.0.0.1/128", "::ffff:10.0.0.1", "10.0.0.0/8"} {
		trusted, err := New([]string{cidr})
		if err != nil {
			t.Fatal(err)
		}
		for _, peer := range []string{"10.0.0.1:80", "[::ffff:10.0.0.1]:80"} {
			if got := trusted.ClientAddr(req(peer, "X-Forwarded-For", "198.51.100.7")).String(); got != "198.51.100.7" {
				t.Errorf("trusted %s, peer %s: client %s, want 198.51.100.7", cidr, peer, got)
			}
		}
	}
}

// The limits of what ClientAddr reads: at most 32 hops from the right (a
// client further left is never looked for: the left-most hop examined is
// taken), and nodes of at most 64 bytes.
func TestClientAddrLimits(t *testing.T) {
	trusted, _ := New([]string{"10.0.0.0/8"})
	hops := func(n int) string {
		h := make([]string, n)
		for i := range h {
			h[i] = fmt.Sprintf("10.0.0.%d", i+1)
		}
		return strings.Join(h, ", ")
	}
	zone := func(n int) string { return "fe80::1%" + strings.Repeat("z", n-len("fe80::1%")) }
	for _, tc := range []struct {
		name, xff, want string
	}{
		{"client behind 31 proxies", "198.51.100.7, " + hops(31), "198.51.100.7"},
		{"client behind 32 proxies is not looked for", "198.51.100.7, " + hops(32), "10.0.0.1"},
		{"node of 64 bytes", zone(64), "fe80::1"},
		{"node of 65 bytes falls back to the peer", zone(65), "10.1.2.3"},
	} {
		if got := trusted.ClientAddr(req("10.1.2.3:80", "X-Forwarded-For", tc.xff)).String(); got != tc.want {
			t.Errorf("%s: ClientAddr = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestClientAddrFromForwarded(t *testing.T) {
	base, _ := New([]string{"10.0.0.0/8"})
	trusted, err := base.WithHeader("forwarded")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want string
	}{
		{"for= of the right-most untrusted element", req("10.1.2.3:80", "Forwarded", `for=198.51.100.7;proto=https, for="[2001:db8:3::1]:80"`), "2001:db8:3::1"},
		{"X-Forwarded-For is ignored in this mode", req("10.1.2.3:80", "X-Forwarded-For", "6.6.6.6", "Forwarded", "for=198.51.100.7"), "198.51.100.7"},
		{"trusted hops skipped", req("10.1.2.3:80", "Forwarded", "for=198.51.100.7, for=10.0.0.5;by=10.0.0.6"), "198.51.100.7"},
		{"malformed element falls back", req("10.1.2.3:80", "Forwarded", "for"), "10.1.2.3"},
		{"obfuscated node falls back", req("10.1.2.3:80", "Forwarded", "for=_hidden"), "10.1.2.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := trusted.ClientAddr(tc.r).String(); got != tc.want {
				t.Errorf("ClientAddr = %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := base.WithHeader("X-Real-IP"); err == nil {
		t.Fatal("an unsupported header was accepted")
	}
}

func TestParseTrustedRejects(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "nope", "1.2.3"} {
		if _, err := ParseTrusted([]string{bad}); err == nil {
			t.Errorf("ParseTrusted(%q) accepted", bad)
		}
	}
}

func TestHostProto(t *testing.T) {
	trusted, _ := ParseTrusted([]string{"10.0.0.0/8"})
	h, p := trusted.HostProto(req("203.0.113.9:1", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https"))
	if h != "geotoll.local" || p != "http" {
		t.Errorf("untrusted peer: %s %s", h, p)
	}
	h, p = trusted.HostProto(req("10.0.0.1:1", "X-Forwarded-Host", "tiles.example.com", "X-Forwarded-Proto", "https"))
	if h != "tiles.example.com" || p != "https" {
		t.Errorf("trusted peer: %s %s", h, p)
	}
	viaForwarded, _ := trusted.WithHeader(Forwarded)
	h, p = viaForwarded.HostProto(req("10.0.0.1:1", "Forwarded", `host="maps.example.org";proto=https`))
	if h != "maps.example.org" || p != "https" {
		t.Errorf("Forwarded: %s %s", h, p)
	}
	// A client-sent value before the proxy's own is ignored: right-most wins.
	h, p = trusted.HostProto(req("10.0.0.1:1", "X-Forwarded-Host", "evil.example, tiles.example.com", "X-Forwarded-Proto", "http, https"))
	if h != "tiles.example.com" || p != "https" {
		t.Errorf("appended list: %s %s", h, p)
	}
	h, _ = viaForwarded.HostProto(req("10.0.0.1:1", "Forwarded", `host=evil.example, host=maps.example.org`))
	if h != "maps.example.org" {
		t.Errorf("Forwarded list: %s", h)
	}
	h, _ = trusted.HostProto(req("10.0.0.1:1", "X-Forwarded-Host", "bad host/<script>"))
	if h != "geotoll.local" {
		t.Errorf("invalid forwarded host accepted: %s", h)
	}
	// Only http and https are schemes; a list may start empty; a host name
	// has at most 255 bytes.
	for _, tc := range []struct {
		name        string
		hdr         []string
		host, proto string
	}{
		{"X-Forwarded-Proto ftp", []string{"X-Forwarded-Proto", "ftp"}, "geotoll.local", "http"},

		{"list starting empty", []string{"X-Forwarded-Proto", ",https"}, "geotoll.local", "https"},
		{"host of 255 bytes", []string{"X-Forwarded-Host", strings.Repeat("a", 255)}, strings.Repeat("a", 255), "http"},
		{"host of 256 bytes", []string{"X-Forwarded-Host", strings.Repeat("a", 256)}, "geotoll.local", "http"},
	} {
		if h, p := trusted.HostProto(req("10.0.0.1:1", tc.hdr...)); h != tc.host || p != tc.proto {
			t.Errorf("%s: %.20s %s, want %.20s %s", tc.name, h, p, tc.host, tc.proto)
		}
	}
	if h, p := viaForwarded.HostProto(req("10.0.0.1:1", "Forwarded", "proto=ftp")); h != "geotoll.local" || p != "http" {
		t.Errorf("Forwarded proto=ftp: %s %s", h, p)
	}
}

// HostProto reads the host and scheme from the header family the trusted
// proxies write, as ClientAddr reads the address: X-Forwarded-Host and
// X-Forwarded-Proto beside X-Forwarded-For, the host= and proto= of
// Forwarded beside Forwarded. A proxy that writes one family passes the
// other through as the client sent it, so reading both would let any
// client behind it choose the host of the tile URLs TileJSON hands out.
func TestHostProtoReadsOnlyTheConfiguredHeader(t *testing.T) {
	viaXFF, err := New([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	viaForwarded, err := viaXFF.WithHeader(Forwarded)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		t           *Trusted
		peer        string
		hdr         []string
		host, proto string
	}{
		{"X-Forwarded-For mode: a client's Forwarded is ignored", viaXFF, "10.0.0.1:1",
			[]string{"X-Forwarded-Host", "tiles.example.com", "X-Forwarded-Proto", "https", "Forwarded", `host=evil.example;proto=http`},
			"tiles.example.com", "https"},
		{"X-Forwarded-For mode: Forwarded alone changes nothing", viaXFF, "10.0.0.1:1",
			[]string{"Forwarded", `host="evil.example";proto=https`}, "geotoll.local", "http"},
		{"Forwarded mode: host= and proto= are read", viaForwarded, "10.0.0.1:1",
			[]string{"Forwarded", `for=198.51.100.7;host="maps.example.org";proto=https`}, "maps.example.org", "https"},
		{"Forwarded mode: a client's X-Forwarded-* are ignored", viaForwarded, "10.0.0.1:1",
			[]string{"X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https", "Forwarded", "for=198.51.100.7"},
			"geotoll.local", "http"},
		{"Forwarded mode: the right-most element wins", viaForwarded, "10.0.0.1:1",
			[]string{"Forwarded", `host=evil.example;proto=https, for=198.51.100.7;host=maps.example.org`}, "maps.example.org", "http"},
		{"Forwarded mode: untrusted peer", viaForwarded, "203.0.113.9:1",
			[]string{"Forwarded", `host=evil.example;proto=https`}, "geotoll.local", "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if h, p := tc.t.HostProto(req(tc.peer, tc.hdr...)); h != tc.host || p != tc.proto {
				t.Errorf("HostProto = %s %s, want %s %s", h, p, tc.host, tc.proto)
			}
		})
	}
}

// FuzzClientAddr: arbitrary forwarding headers never panic, and the answer
// is always the socket peer or an address written in the header it reads —
// never one made up — and always the peer when the peer is not trusted.
func FuzzClientAddr(f *testing.F) {
	for _, s := range []string{"198.51.100.7", "1.1.1.1, 10.0.0.1", "[2001:db8::1]:80", "", ",,,", "for=1.2.3.4", `for="[::1]"`, "unknown",
		"1.2.3.4:99999", "10.0.0.1, 10.0.0.2", "for=198.51.100.7;proto=https, for=10.0.0.5", "::ffff:198.51.100.9", "fe80::1%eth0"} {
		f.Add(s, s)
	}
	trusted, _ := New([]string{"10.0.0.0/8", "::1/128"})
	viaForwarded, _ := trusted.WithHeader(Forwarded)
	peer := netip.MustParseAddr("10.0.0.9")
	f.Fuzz(func(t *testing.T, xff, fwd string) {
		for _, c := range []struct {
			t            *Trusted
			header, text string
		}{
			{trusted, XForwardedFor, xff},
			{viaForwarded, Forwarded, fwd},
		} {
			got := c.t.ClientAddr(req("10.0.0.9:1000", c.header, c.text))
			if !got.IsValid() {
				t.Fatalf("invalid client address for %s %q", c.header, c.text)
			}
			if got != peer && !addressesIn(c.text)[got] {
				t.Fatalf("%s %q: client %s is neither the peer nor an address in the header", c.header, c.text, got)
			}
		}
		// The header ClientAddr does not read never counts.
		if got := trusted.ClientAddr(req("10.0.0.9:1000", Forwarded, fwd)); got != peer {
			t.Fatalf("Forwarded %q read in X-Forwarded-For mode: %s", fwd, got)
		}
		if untrusted := trusted.ClientAddr(req("203.0.113.1:1", "X-Forwarded-For", xff)); untrusted.String() != "203.0.113.1" {
			t.Fatalf("untrusted peer overridden by %q → %s", xff, untrusted)
		}
	})
}

// addressesIn is every IP address written anywhere in a header value, found
// without ClientAddr's parser: the text is cut at every character that
// cannot be part of an address (separators, quotes, brackets, spaces), and
// each piece that parses as an address, with or without a port or a zone,
// counts — unmapped from IPv4-in-IPv6, zone dropped, as ClientAddr reports
// them. It finds more than ClientAddr may answer, never less.
func addressesIn(text string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, piece := range strings.FieldsFunc(text, func(r rune) bool {
		return strings.ContainsRune(`,;="[]`, r) || unicode.IsSpace(r)
	}) {
		for _, s := range []string{piece, strings.SplitN(piece, "%", 2)[0]} {
			if a, err := netip.ParseAddr(s); err == nil {
				out[a.Unmap().WithZone("")] = true
			}
			if ap, err := netip.ParseAddrPort(s); err == nil {
				out[ap.Addr().Unmap().WithZone("")] = true
			}
		}
	}
	return out
}

// validHost accepts what a URL's authority may hold as host[:port] — a
// name (RFC 3986's unreserved characters: Docker names such as
// tile_server), an IPv4 address or a bracketed IPv6 one, and a port from
// 1 to 65535 — and nothing else: a host whose port is not a port number
// would be written into TileJSON's tile URLs as it came.
func TestValidHost(t *testing.T) {
	for _, good := range []string{"example.com", "example.com:8080", "EXAMPLE.com:1", "tiles.example.com:65535",
		"localhost", "127.0.0.1", "127.0.0.1:443", "[2001:db8::1]", "[2001:db8::1]:8443", "[::1]:1", "a-b.c",
		"tile_server:8080", "geotoll_web_1", "a~b", "example.com.", strings.Repeat("a", 255)} {
		if !validHost(good) {
			t.Errorf("validHost(%q) = false", good)
		}
	}
	for _, bad := range []string{"", "example.com:abc", "example.com:", "example.com:0", "example.com:65536",
		"example.com:99999", "example.com:080800", "example.com:-1", "example.com:+80", "example.com:8080:1",
		":8080", "2001:db8::1", "[2001:db8::1", "2001:db8::1]", "[2001:db8::1]x", "[2001:db8::1]:", "[2001:db8::1]:abc",
		"[example.com]", "[]", "[fe80::1%eth0]", "a b", "a/b", "a@b", "a?b", "a#b", `a"b`, "a\\b", "a%41", strings.Repeat("a", 256)} {
		if validHost(bad) {
			t.Errorf("validHost(%q) = true", bad)
		}
	}
}

// A forwarded host whose port is not a port number is not believed: the
// request's own host stays, as for any other invalid forwarded host.
func TestHostProtoRejectsInvalidPorts(t *testing.T) {
	viaXFF, _ := New([]string{"10.0.0.0/8"})
	viaForwarded, _ := viaXFF.WithHeader(Forwarded)
	for _, port := range []string{"abc", "0", "65536", ""} {
		if h, _ := viaXFF.HostProto(req("10.0.0.1:1", "X-Forwarded-Host", "tiles.example.com:"+port)); h != "geotoll.local" {
			t.Errorf("X-Forwarded-Host tiles.example.com:%s accepted: %s", port, h)
		}
		if h, _ := viaForwarded.HostProto(req("10.0.0.1:1", "Forwarded", `host="tiles.example.com:`+port+`"`)); h != "geotoll.local" {
			t.Errorf("Forwarded host=tiles.example.com:%s accepted: %s", port, h)
		}
	}
	if h, _ := viaXFF.HostProto(req("10.0.0.1:1", "X-Forwarded-Host", "tiles.example.com:8443")); h != "tiles.example.com:8443" {
		t.Errorf("a valid port refused: %s", h)
	}
}
