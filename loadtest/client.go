package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/redact"
	"github.com/geotoll/geotoll/problem"
)

// Client asks one running geotoll — any build of it — for tiles, with an
// API key, over loopback unless AllowRemote.
type Client struct {
	BaseURL     string // e.g. http://127.0.0.1:8080
	Key         string // sent as X-API-Key ("" = anonymous)
	AllowRemote bool
	// HTTP is nil for one with a 60 s timeout that never asks for gzip by
	// itself. Its redirects are followed to loopback only, unless
	// AllowRemote (a client of the caller's with no CheckRedirect of its
	// own is given that policy).
	HTTP *http.Client
}

// maxRedirects is how many redirects a request follows, as net/http's
// default policy.
const maxRedirects = 10

// parseBase parses a base URL the instruments append paths to:
// http(s)://host[:port], a base path allowed, no user, query or fragment
// (each request's path would land in the query: ?x=1/healthz asked for
// the preview page).
func parseBase(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.ForceQuery || strings.Contains(base, "#") {
		return nil, fmt.Errorf("url %q must be http(s)://host[:port][/base path], without user, query or fragment", redact.URL(base))
	}
	return u, nil
}

func (c *Client) check() error {
	u, err := parseBase(c.BaseURL)
	if err != nil {
		return err
	}
	if !c.AllowRemote && !isLoopback(u.Hostname()) {
		return fmt.Errorf("url host %q is not loopback; pass -allow-remote to measure another machine", u.Hostname())
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
			DisableCompression: true, MaxIdleConnsPerHost: 64,
		}}
	}
	if c.HTTP.CheckRedirect == nil {
		c.HTTP.CheckRedirect = c.checkRedirect
	}
	return nil
}

// checkRedirect follows a redirect only to loopback, unless AllowRemote:
// a redirect must not aim the measurement at another machine when -url
// could not.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if !c.AllowRemote && !isLoopback(req.URL.Hostname()) {
		return fmt.Errorf("redirected to host %q, which is not loopback; pass -allow-remote to follow it", req.URL.Hostname())
	}
	return nil
}

// TilePath is the URL path of a layer's tile.
func TilePath(layer string, t maptile.Tile) string {
	return fmt.Sprintf("/tiles/%s/%d/%d/%d.mvt", layer, t.Z, t.X, t.Y)
}

func (c *Client) get(ctx context.Context, path string, gzip bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.BaseURL, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	if c.Key != "" {
		req.Header.Set("X-API-Key", c.Key)
	}
	if gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	return c.HTTP.Do(req)
}

// DryRun returns the price the server quotes for the tile (?dry_run=1):
// nothing charged, nothing queried. A quote the key's budget would refuse
// (would_allow false) is an error: the real request would be refused.
func (c *Client) DryRun(ctx context.Context, layer string, t maptile.Tile) (float64, error) {
	resp, err := c.get(ctx, TilePath(layer, t)+"?dry_run=1", false)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Cost       *float64 `json:"cost"`
		WouldAllow *bool    `json:"would_allow"`
		RetryAfter int      `json:"retry_after"`
		Detail     string   `json:"detail"` // a refusal's problem document
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body)
	switch {
	case resp.StatusCode != http.StatusOK && body.Detail != "":
		return 0, fmt.Errorf("dry run %s: status %d: %s", TilePath(layer, t), resp.StatusCode, body.Detail)
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("dry run %s: status %d", TilePath(layer, t), resp.StatusCode)
	case err != nil:
		return 0, fmt.Errorf("dry run %s: %w", TilePath(layer, t), err)
	case body.Cost == nil:
		return 0, fmt.Errorf("dry run %s: no cost in the answer", TilePath(layer, t))
	}
	if body.WouldAllow != nil && !*body.WouldAllow {
		return *body.Cost, fmt.Errorf("dry run %s: the key's budget would refuse it (would_allow false, retry after %d s): use a key of a tier that never refuses",
			TilePath(layer, t), body.RetryAfter)
	}
	return *body.Cost, nil
}

// TileResponse is what a real tile request got.
type TileResponse struct {
	Status   int
	Cost     float64 // X-Request-Cost; NaN when absent
	Estimate float64 // X-Request-Cost-Estimate; NaN when absent
	Bytes    int     // body as sent (identity: the MVT itself)
	Features int     // features over all MVT layers (identity 200s only)
	// Problem is the type of the problem document (RFC 9457) an error
	// answer carried, e.g. "urn:geotoll:problem:timeout"; "" otherwise.
	Problem string
	// CacheHit reports that the server answered from its tile cache
	// (X-Cache: HIT): no query ran, and the price was a hit's.
	CacheHit bool
	Took     time.Duration
}

// CacheHitError is the error of an instrument that measures the server's
// rendering — a tile's price against its database time, tiles per second
// against the database's — when the server answered a tile from its tile
// cache (X-Cache: HIT): no query ran and the price was a hit's, so what
// it measured was the cache.
type CacheHitError struct {
	Path string // the tile's, e.g. /tiles/places/14/8802/5373.mvt
}

func (e *CacheHitError) Error() string {
	return fmt.Sprintf("%s was answered from the server's tile cache (X-Cache: HIT): a cached tile measures the cache, "+
		"not the tile's price or its rendering; run the server with its tile cache off (tiles.cache.max_bytes 0, "+
		"or GEOTOLL_TILES_CACHE_MAX_BYTES=0)", e.Path)
}

// Drawn reports whether the server drew the tile: a 200 or a 204.
func (r TileResponse) Drawn() bool {
	return r.Status == http.StatusOK || r.Status == http.StatusNoContent
}

// TimedOut reports whether the server admitted the request and gave up on
// its query: a 503 of problem type timeout (the statement_timeout, or the
// request's deadline). Every other 503 — the rate limiter unavailable, the
// global budget spent, the database down or busy — and every refusal is
// something else.
func (r TileResponse) TimedOut() bool {
	return r.Status == http.StatusServiceUnavailable && r.Problem == problem.Type(problem.Timeout)
}

// Answer describes the response for an error message: its status and,
// when it carried one, its problem type.
func (r TileResponse) Answer() string {
	if r.Problem == "" {
		return strconv.Itoa(r.Status)
	}
	return fmt.Sprintf("%d (%s)", r.Status, r.Problem)
}

// Tile requests the tile (uncompressed) and decodes it.
func (c *Client) Tile(ctx context.Context, layer string, t maptile.Tile) (TileResponse, error) {
	start := time.Now()
	resp, err := c.get(ctx, TilePath(layer, t), false)
	if err != nil {
		return TileResponse{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return TileResponse{}, err
	}
	r := TileResponse{
		Status: resp.StatusCode, Bytes: len(body), Took: time.Since(start), CacheHit: resp.Header.Get("X-Cache") == "HIT",
		Cost: headerFloat(resp.Header, "X-Request-Cost"), Estimate: headerFloat(resp.Header, "X-Request-Cost-Estimate"),
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), problem.ContentType) {
		var doc struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &doc) == nil {
			r.Problem = doc.Type
		}
	}
	if resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Encoding") == "" {
		layers, err := mvt.Unmarshal(body)
		if err != nil {
			return r, fmt.Errorf("%s: not a tile: %w", TilePath(layer, t), err)
		}
		for _, l := range layers {
			r.Features += len(l.Features)
		}
	}
	return r, nil
}

func headerFloat(h http.Header, name string) float64 {
	v, err := strconv.ParseFloat(h.Get(name), 64)
	if err != nil {
		return math.NaN()
	}
	return v
}
