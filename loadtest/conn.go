package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/geotoll/geotoll/problem"
)

// conn is one keep-alive HTTP/1.1 connection that sends GET requests and
// reads whole responses, without net/http's per-request machinery: the
// load generators of Loop and RunProtect are as lean as pgbench is on the
// database side, so that on a machine the server shares, the client takes
// as little CPU from it as it can. It speaks just enough HTTP/1.1 for
// geotoll's answers — Content-Length or chunked bodies, "Connection:
// close" — and is not safe for concurrent use.
type conn struct {
	addr   string // host:port
	host   string // the Host header
	base   string // the base URL's path, ahead of every request's ("" or "/maps")
	tls    *tls.Config
	header string   // extra request header lines, each ending in \r\n
	local  net.Addr // the source address to dial from; nil: the system's choice
	// problems: read the type of a problem document (response.problem).
	problems bool
	c        net.Conn
	br       *bufio.Reader
	req      []byte
}

// response is what a request got: its status, the body bytes read (as
// sent: gzip stays compressed) and the headers asked for.
type response struct {
	status  int
	bytes   int64
	headers map[string]string
	head    bool // the whole head was read (the body may still be cut)
	// problem is the type of the problem document (RFC 9457) the answer
	// carried, read only when the connection asks for it (conn.problems)
	// and the document is at most maxProblem bytes long; "" otherwise.
	problem string
	// cacheHit: the server answered from its tile cache (X-Cache: HIT).
	cacheHit bool
}

// maxProblem bounds the problem documents a conn reads the type of.
const maxProblem = 16 << 10

// newConn prepares a connection to base (http or https); header lines
// ("Name: value") are sent with every request. It dials on first use.
func newConn(base string, header ...string) (*conn, error) {
	u, err := parseBase(base)
	if err != nil {
		return nil, err
	}
	c := &conn{host: u.Host, addr: u.Host, base: strings.TrimSuffix(u.EscapedPath(), "/")}
	if u.Port() == "" {
		c.addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	if u.Scheme == "https" {
		c.tls = &tls.Config{ServerName: u.Hostname()}
	}
	for _, h := range header {
		c.header += h + "\r\n"
	}
	return c, nil
}

// get sends GET path (below the base URL's path) and reads the response. want names the response
// headers to return (canonical names, e.g. "X-Request-Cost"). A failed
// request closes the connection; the next one dials again. With an error,
// the response holds what was read before it — a status whose body was
// cut short is no answer: count the request as an error (status 0).
func (c *conn) get(ctx context.Context, path string, want ...string) (response, error) {
	if c.c == nil {
		if err := c.dial(ctx); err != nil {
			return response{}, err
		}
	}
	nc := c.c
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.req = append(c.req[:0], "GET "...)
	c.req = append(c.req, c.base...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.host...)
	c.req = append(c.req, "\r\n"...)
	c.req = append(c.req, c.header...)
	c.req = append(c.req, "\r\n"...)
	if _, err := nc.Write(c.req); err != nil {
		c.Close()
		return response{}, err
	}
	r, keep, err := c.read(want)
	if err != nil || !keep {
		c.Close()
	}
	return r, err
}

func (c *conn) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: c.local}
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	if c.tls != nil {
		tc := tls.Client(nc, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return err
		}
		nc = tc
	}
	c.c, c.br = nc, bufio.NewReaderSize(nc, 64<<10)
	return nil
}

// Close closes the connection.
func (c *conn) Close() {
	if c.c != nil {
		_ = c.c.Close()
		c.c = nil
	}
}

var errMalformed = errors.New("malformed HTTP response")

// read reads one response; keep reports whether the connection may be
// used again.
func (c *conn) read(want []string) (r response, keep bool, err error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return r, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return r, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	if r.status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return r, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	length, chunked, keep, isProblem := int64(-1), false, true, false
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return r, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			r.head = true
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return r, false, fmt.Errorf("%w: header %q", errMalformed, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
				return r, false, fmt.Errorf("%w: Content-Length %q", errMalformed, value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("X-Cache")):
			r.cacheHit = bytes.EqualFold(value, []byte("HIT"))
		case bytes.EqualFold(name, []byte("Content-Type")):
			mt, _, _ := bytes.Cut(value, []byte(";"))
			isProblem = bytes.EqualFold(bytes.TrimSpace(mt), []byte(problem.ContentType))
		}
		for _, w := range want {
			if bytes.EqualFold(name, []byte(w)) {
				if r.headers == nil {
					r.headers = make(map[string]string, len(want))
				}
				r.headers[w] = string(value)
			}
		}
	}
	switch {
	case r.status == 204 || r.status == 304 || (r.status >= 100 && r.status < 200):
	case c.problems && isProblem && !chunked && length >= 0 && length <= maxProblem:
		body := make([]byte, length)
		n, rerr := io.ReadFull(c.br, body)
		r.bytes, err = int64(n), rerr
		if err == nil {
			var doc struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(body, &doc) == nil {
				r.problem = doc.Type
			}
		}
	case chunked:
		r.bytes, err = c.readChunked()
	case length >= 0:
		r.bytes, err = io.CopyN(io.Discard, c.br, length)
	default: // the body ends with the connection
		r.bytes, err = io.Copy(io.Discard, c.br)
		keep = false
	}
	return r, keep, err
}

// readChunked discards a chunked body and returns its length.
func (c *conn) readChunked() (int64, error) {
	var total int64
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return total, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 64)
		if err != nil || n < 0 {
			return total, fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if n == 0 {
			for { // trailers, up to the blank line
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return total, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return total, nil
				}
			}
		}
		m, err := io.CopyN(io.Discard, c.br, n)
		total += m
		if err != nil {
			return total, err
		}
		if _, err := c.br.Discard(2); err != nil { // the chunk's CRLF
			return total, err
		}
	}
}

// chargeHeaders are the response headers charge and shadowPrice read.
var chargeHeaders = []string{"X-Request-Cost", "X-Request-Cost-Estimate", "X-RateLimit-Shadow"}

// charge is what the answer says the request was charged: its
// X-Request-Cost when its head — read whole, the body cut or not (by a
// write timeout, or a run's end) — says it was charged (Charged); an
// error when such a head carries no number. Ask for chargeHeaders.
func (r response) charge() (cost float64, charged bool, err error) {
	if !r.head || !Charged(r.status, r.headers["X-Request-Cost-Estimate"], r.headers["X-RateLimit-Shadow"]) {
		return 0, false, nil
	}
	cost, err = strconv.ParseFloat(r.headers["X-Request-Cost"], 64)
	if err != nil {
		return 0, true, fmt.Errorf("charged, without X-Request-Cost: %q", r.headers["X-Request-Cost"])
	}
	return cost, true, nil
}

// shadowPrice is what the answer says of a request a shadow tier admitted
// though its bucket could not pay (ShadowAdmitted), its head read whole:
// the price it was admitted at (X-Request-Cost), of which nothing was
// spent; an error when such a head carries no number. Ask for
// chargeHeaders.
func (r response) shadowPrice() (price float64, shadowed bool, err error) {
	if !r.head || !ShadowAdmitted(r.status, r.headers["X-RateLimit-Shadow"]) {
		return 0, false, nil
	}
	price, err = strconv.ParseFloat(r.headers["X-Request-Cost"], 64)
	if err != nil {
		return 0, true, fmt.Errorf("admitted in shadow, without X-Request-Cost: %q", r.headers["X-Request-Cost"])
	}
	return price, true, nil
}
