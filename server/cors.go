package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/geotoll/geotoll/internal/redact"
	"github.com/geotoll/geotoll/problem"
)

// CORS lets web pages on other origins call the API (map frontends on
// their own domain fetching tiles).
//
// Without Origins no CORS header is ever sent. "*" admits every origin,
// answered with "Access-Control-Allow-Origin: *" and the exposed headers on
// every response, whether the request carried an Origin or not: a public
// tile fetched without one (by curl, a server, a same-origin page) may be
// kept by a shared cache and handed to a map on another origin, and
// without the header there the browser would refuse it. The answer does
// not depend on the Origin, so it does not vary by it. "*" cannot be
// combined with Credentials (browsers refuse that pair, and echoing any
// origin with credentials would hand every site the user's cookies).
// Listed origins are echoed back with Vary: Origin.
//
// rs/cors would send Vary: Origin with every wildcard answer too — a
// shared cache then keeps a copy of each public tile per origin — and
// answers a refused preflight 204 with no headers rather than a 403
// problem; TestCORSWildcard and TestCORSListedOriginsWithCredentials fail
// with it, which is why this is ours.
type CORS struct {
	Origins     []string      // "https://maps.example.com" (scheme://host[:port]) or "*"
	Credentials bool          // Access-Control-Allow-Credentials: true
	MaxAge      time.Duration // how long a browser may reuse a preflight; 0: DefaultCORSMaxAge
}

// DefaultCORSMaxAge is a preflight's Access-Control-Max-Age when CORS
// sets none.
const DefaultCORSMaxAge = 10 * time.Minute

// Headers a browser may send and read across origins. corsAllow has what
// the API reads (Cache-Control and Pragma: a reload, or a client asking for
// a fresh render, sends them; If-Match and If-None-Match: the fence admin's
// conditional requests; traceparent and tracestate: the W3C trace context
// a browser app instrumented with OpenTelemetry sends, which the server's
// spans follow); corsExpose every header the API sets that is
// not CORS-safelisted and that a script may want: budget and price, where a
// new fence lives (Location), what a route takes (Allow) and how to
// authenticate (WWW-Authenticate). TestCORSExposesEveryHeaderTheServerSets
// fails when a header set by name is missing here.
const (
	corsAllow  = "Authorization, Cache-Control, Content-Type, If-Match, If-None-Match, Pragma, traceparent, tracestate, X-API-Key, X-Request-ID"
	corsExpose = "Allow, ETag, Location, Retry-After, RateLimit, RateLimit-Policy, WWW-Authenticate, X-Cache, " +
		"X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, X-RateLimit-Shadow, X-Request-Cost, " +
		"X-Request-Cost-Estimate, X-Request-ID, X-Tile-Reduced"
)

// Validate refuses "*" with credentials and anything that is not an origin.
func (c CORS) Validate() error {
	var errs []error
	for _, o := range c.Origins {
		if o == "*" {
			if c.Credentials {
				errs = append(errs, errors.New(`cors: origin "*" cannot be combined with credentials; list the origins`))
			}
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.HasSuffix(o, "/") {
			errs = append(errs, fmt.Errorf("cors: origin %q must be scheme://host[:port] (no path) or \"*\"", redact.URL(o)))
		}
	}
	if c.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("cors: max_age %s must not be negative", c.MaxAge))
	}
	return errors.Join(errs...)
}

// wrap adds the CORS headers and answers preflight requests (OPTIONS with
// Origin and Access-Control-Request-Method: an OPTIONS without Origin is
// none, whatever else it carries) itself: 403 for an origin not allowed,
// 404 for a path no route answers, else 204 naming in Allow and
// Access-Control-Allow-Methods what methods reports the path's routes
// take.
// anyOriginValue and exposeValue are the header values a wildcard answer
// carries on every response, made once: len and cap 1, so that an Add to
// a response's header copies them instead of writing into them.
var (
	anyOriginValue = []string{"*"}
	exposeValue    = []string{corsExpose}
)

func (c CORS) wrap(next http.Handler, methods func(*http.Request) []string) http.Handler {
	if len(c.Origins) == 0 {
		return next
	}
	anyOrigin := false
	allowed := make(map[string]bool, len(c.Origins))
	for _, o := range c.Origins {
		if o == "*" {
			anyOrigin = true
		}
		allowed[strings.ToLower(o)] = true
	}
	wildcard := anyOrigin && !c.Credentials // Validate refuses "*" with credentials
	maxAge := c.MaxAge
	if maxAge == 0 {
		maxAge = DefaultCORSMaxAge
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		preflight := r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != ""
		h := w.Header()
		if !wildcard {
			h.Add("Vary", "Origin")
		}
		if preflight {
			h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
		}
		// In wildcard mode every answer carries the CORS headers, Origin
		// or not (see CORS).
		ok := wildcard || (origin != "" && (anyOrigin || allowed[strings.ToLower(origin)]))
		if ok {
			if wildcard {
				h["Access-Control-Allow-Origin"] = anyOriginValue
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
			}
			if c.Credentials {
				h.Set("Access-Control-Allow-Credentials", "true")
			}
		}
		if !preflight {
			if ok {
				h["Access-Control-Expose-Headers"] = exposeValue
			}
			next.ServeHTTP(w, r)
			return
		}
		if !ok {
			problem.Write(w, r, &problem.Error{Code: problem.Forbidden, Detail: "this origin may not call the API"})
			return
		}
		allowed := methods(r)
		if len(allowed) == 0 {
			notFound(w, r)
			return
		}
		h.Set("Allow", strings.Join(append(allowed, http.MethodOptions), ", "))
		h.Set("Access-Control-Allow-Methods", strings.Join(allowed, ", "))
		h.Set("Access-Control-Allow-Headers", corsAllow)
		h.Set("Access-Control-Max-Age", strconv.Itoa(int(maxAge/time.Second)))
		w.WriteHeader(http.StatusNoContent)
	})
}
