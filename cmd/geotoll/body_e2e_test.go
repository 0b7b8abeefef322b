package main

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A client that sends a body's first bytes and then nothing is cut off at
// http.read_timeout. That is not malformed JSON: the answer is a 408
// problem (RFC 9110 §15.5.9), and its detail says what happened without
// the socket error's text, which names the server's own address and port
// (an internal address behind a proxy).
func TestEndToEndBodyNotSentInTimeIs408(t *testing.T) {
	t.Parallel()
	const admin = "e2e-admin-key-slow-body-0123456789"
	m := startMain(t, func(c *Config) {
		c.HTTP.ReadTimeout = 500 * time.Millisecond
		c.Geofence.AdminKeys = []string{admin}
		c.Geofence.WriterDatabaseURL = fenceWriterURL(t)
	})
	for _, tc := range []struct{ path, body string }{
		{"/geofence/check", `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`},
		{"/geofence/fences", `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]},"properties":{"name":"slow"}}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			head := "POST " + tc.path + " HTTP/1.1\r\nHost: " + m.Addr() + adminKeyFor(tc.path, admin) +
				"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(tc.body)) + "\r\n\r\n"
			// The head and a third of the body; the rest never comes.
			resp, body := rawExchange(t, m.Addr(), head+tc.body[:len(tc.body)/3])
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%d %q %s, want a 408 problem", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			_, port, _ := net.SplitHostPort(m.Addr())
			for _, leak := range []string{m.Addr(), ":" + port, "read tcp", "i/o timeout"} {
				if strings.Contains(body, leak) {
					t.Errorf("the answer shows the socket error (%q): %s", leak, body)
				}
			}
		})
	}
}

// A body whose Content-Length is over the route's limit is a 413 problem
// at once, from the request's head: the server neither invites it with
// "100 Continue" (a client that sent Expect: 100-continue to learn whether
// to upload would upload it all to be refused) nor waits for a body it
// would refuse (a client that sends no body until it hears back would wait
// for http.read_timeout and get a 408).
func TestEndToEndBodyOverItsLimitIs413BeforeItIsSent(t *testing.T) {
	t.Parallel()
	const admin = "e2e-admin-key-big-body-0123456789"
	m := startMain(t, func(c *Config) {
		c.HTTP.ReadTimeout = 500 * time.Millisecond
		c.Geofence.MaxBodyBytes = 4096
		c.Geofence.MaxFenceBytes = 8192
		c.Geofence.AdminKeys = []string{admin}
		c.Geofence.WriterDatabaseURL = fenceWriterURL(t)
	})
	for _, tc := range []struct {
		method, path string
		length       int
	}{
		{"POST", "/geofence/check", 4097},
		{"POST", "/geofence/fences", 8193},
		{"PUT", "/geofence/fences/1", 8193},
	} {
		for _, expect := range []bool{true, false} {
			t.Run(tc.method+" "+tc.path+" expect="+strconv.FormatBool(expect), func(t *testing.T) {
				head := tc.method + " " + tc.path + " HTTP/1.1\r\nHost: " + m.Addr() + adminKeyFor(tc.path, admin) +
					"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(tc.length) + "\r\n"
				if expect {
					head += "Expect: 100-continue\r\n"
				}
				// The head alone: the body is sent only once the server asks for it.
				resp, body := rawExchange(t, m.Addr(), head+"\r\n")
				if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%d %q %s, want a 413 problem", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
				if !resp.Close { // the body never read, the connection is not kept for another request
					t.Errorf("the 413 keeps the connection open (Connection: %q)", resp.Header.Get("Connection"))
				}
			})
		}
	}
}

// adminKeyFor is the X-API-Key header line of a raw request to path: the
// fence admin key on the fence routes, none on a check (an admin key is
// no API key: a check presenting it is refused from its head).
func adminKeyFor(path, admin string) string {
	if strings.HasPrefix(path, "/geofence/check") {
		return ""
	}
	return "\r\nX-API-Key: " + admin
}

// rawExchange writes raw to a new connection to addr and reads the first
// response, and its body, within a minute.
func rawExchange(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp, b.String()
}

// A request that presents an unknown key is a 401 from its head: its body
// — which only its price needs, and an unknown key is never priced — is
// neither invited with "100 Continue" nor waited for. A key guesser cannot
// make the server read what it uploads.
func TestEndToEndUnknownKeyIs401BeforeItsBody(t *testing.T) {
	t.Parallel()
	m := startMain(t, func(c *Config) {
		c.HTTP.ReadTimeout = 500 * time.Millisecond
		c.Geofence.AdminKeys = []string{"e2e-admin-key-unknown-key-0123456789"}
		c.Geofence.WriterDatabaseURL = fenceWriterURL(t)
	})
	for _, path := range []string{"/geofence/check", "/geofence/check?layer=geofences", "/geofence/fences"} {
		for _, expect := range []bool{true, false} {
			t.Run(path+" expect="+strconv.FormatBool(expect), func(t *testing.T) {
				head := "POST " + path + " HTTP/1.1\r\nHost: " + m.Addr() + "\r\nX-API-Key: gt_not-a-key-anyone-has" +
					"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
				if expect {
					head += "Expect: 100-continue\r\n"
				}
				resp, body := rawExchange(t, m.Addr(), head+"\r\n")
				if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%d %q %s, want a 401 problem", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("the 401 names no scheme (WWW-Authenticate): %v", resp.Header)
				}
			})
		}
	}
}
