package geofence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/dryrun"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// ContentType is the media type of a GeoJSON response (RFC 7946).
const ContentType = "application/geo+json"

// Kind names what a priced geofence request does.
type Kind string

// Kinds of priced requests.
const (
	KindWithin   Kind = "within"
	KindBBox     Kind = "bbox"
	KindContains Kind = "contains"
	KindCheck    Kind = "check"
)

// Demand describes what a geofence request asks of the database, from its
// parameters alone, so that the Gate can price it before anything runs.
// Every field has been validated against the Limits.
type Demand struct {
	Kind  Kind
	Layer string // within and bbox: the layer searched
	// RadiusM is the within radius in metres on the ground.
	RadiusM float64
	// Limit is the feature cap the query runs with (within, bbox,
	// contains).
	Limit int
	// Bound is the bbox, unwrapped: a box that crosses the antimeridian has
	// Max[0] = east + 360, so that its area is the sum of its two parts.
	Bound orb.Bound
	// Points is the number of points checked: the batch size, 1 for contains.
	Points int
	// At are the request's positions: within's centre, contains' point,
	// every point of a check.
	At []orb.Point
	// PieceVertices bounds what contains and check test per polygon they
	// find: the most vertices of a piece when they read pieces, 0 when they
	// read whole polygons (a layer without pieces) or render them (contains
	// on the fences answers their geometry).
	PieceVertices int
}

// Gate admits or refuses a priced request. When it refuses, it has written
// the response (429, 401…) itself. It sets budget headers on w either way.
type Gate interface {
	AdmitGeofence(w http.ResponseWriter, r *http.Request, d Demand) bool
}

// Authenticator, when the Gate implements it too, refuses a request whose
// credentials are already known to be bad (a presented key that is
// unknown or revoked) from the request's head, and writes the refusal
// itself. A check's body matters only to its price, and a caller that
// will not be priced is not invited to upload it (no 100 Continue) nor
// waited for.
type Authenticator interface {
	Authenticate(w http.ResponseWriter, r *http.Request, kind Kind) bool
}

// Authorizer decides who may use the fence admin.
type Authorizer interface {
	AllowAdmin(r *http.Request) bool
}

// AdminRefuser, when the Options.Admin authorizer also implements it,
// answers a refused admin call itself: toll.Toll charges the caller's
// failed-auth bucket, so guessing admin keys ends in 429 like guessing any
// key.
type AdminRefuser interface {
	RefuseAdmin(w http.ResponseWriter, r *http.Request)
}

// eitherAdmin admits whom either authorizer admits.
type eitherAdmin [2]Authorizer

func (e eitherAdmin) AllowAdmin(r *http.Request) bool {
	return e[0].AllowAdmin(r) || e[1].AllowAdmin(r)
}

// Options configure a Handler.
type Options struct {
	Layers []Layer // searchable by within and bbox
	Limits Limits
	// AdminKeys may use the fence admin (/geofence/fences) when Admin is nil.
	// Each must be at least MinAdminKeyLen bytes.
	AdminKeys []string
	// Admin, when set, also admits (besides AdminKeys): for identities kept
	// elsewhere, such as API keys in the database marked admin.
	Admin  Authorizer
	Reader Reader // the read-only store
	// Writer writes fences; nil makes fence writes answer 404 "fence admin
	// not configured".
	Writer Writer
	Gate   Gate
	Logger *slog.Logger
	// OnWrite, if set, runs after every fence write that succeeded and
	// before its answer is sent (the server makes the tile layers drawn
	// from the fence table read it, and drops their cached tiles).
	OnWrite func()
	// BasePath prefixes the URLs the handler writes (a fence's Location,
	// the next page of the list): the path a proxy serves geotoll under.
	BasePath string
}

// Handler serves the geofence API; package server routes requests to its
// methods (the fence admin's through Admin).
type Handler struct {
	catalog *Catalog
	limits  Limits
	admins  Authorizer
	reader  Reader
	writer  Writer
	gate    Gate
	log     *slog.Logger
	onWrite func()
	refuse  func(http.ResponseWriter, *http.Request) // nil: a plain 401
	base    string                                   // Options.BasePath
	// writing holds a token per fence write being parsed or written: a
	// fence body of MaxFenceBytes decodes into some 30 times its size, so
	// at most MaxFenceWrites are held in memory at once.
	writing chan struct{}
}

// MaxFenceWrites is how many fence creations and replacements one server
// parses and writes at once; others wait for a turn, while their request
// lasts.
const MaxFenceWrites = 2

// NewHandler validates o and returns the handler.
func NewHandler(o Options) (*Handler, error) {
	var errs []error
	cat, err := NewCatalog(o.Layers)
	if err != nil {
		errs = append(errs, err)
	}
	if err := o.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	keys, err := newAdminKeys(o.AdminKeys)
	if err != nil {
		errs = append(errs, err)
	}
	var admin Authorizer = keys
	if o.Admin != nil {
		admin = eitherAdmin{o.Admin, keys}
	}
	if o.Reader == nil {
		errs = append(errs, errors.New("geofence: no reader"))
	}
	if o.Gate == nil {
		errs = append(errs, errors.New("geofence: no gate"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Handler{catalog: cat, limits: o.Limits, admins: admin, reader: o.Reader, writer: o.Writer, gate: o.Gate, log: log, onWrite: o.OnWrite, refuse: refuserOf(o.Admin), base: strings.TrimRight(o.BasePath, "/"),
		writing: make(chan struct{}, MaxFenceWrites)}, nil
}

// Catalog returns the searchable layers.
func (h *Handler) Catalog() *Catalog { return h.catalog }

// VarID is the route variable of a fence id.
const VarID = "id"

// FencesPath is the fence admin's path (below the base path): the list,
// and FencesPath/{id} each fence.
const FencesPath = "/geofence/fences"

// Within serves GET /geofence/within?layer&lng&lat&radius[&limit]: the
// layer's features within radius metres (on the ground) of the point,
// nearest first, each with its distance_m.
func (h *Handler) Within(w http.ResponseWriter, r *http.Request) {
	q, err := h.parseWithin(r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	d := Demand{Kind: KindWithin, Layer: q.Layer.Name, RadiusM: q.Radius, Limit: q.Limit, At: []orb.Point{{q.Lng, q.Lat}}}
	if !h.gate.AdmitGeofence(w, r, d) {
		return
	}
	fs, truncated, err := h.reader.Within(r.Context(), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeCollection(w, r, http.StatusOK, fs, func(c *collection) { c.Truncated = truncated })
}

// BBox serves GET /geofence/bbox?layer&bbox=minx,miny,maxx,maxy[&limit]:
// the layer's features that intersect the box, in id order. A box with
// minx > maxx crosses the antimeridian and is searched as its two parts.
func (h *Handler) BBox(w http.ResponseWriter, r *http.Request) {
	q, err := h.parseBBox(r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	d := Demand{Kind: KindBBox, Layer: q.Layer.Name, Bound: q.Box.Unwrapped(), Limit: q.Limit}
	if !h.gate.AdmitGeofence(w, r, d) {
		return
	}
	fs, truncated, err := h.reader.BBox(r.Context(), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeCollection(w, r, http.StatusOK, fs, func(c *collection) { c.Truncated = truncated })
}

// Contains serves GET /geofence/contains?lng&lat[&limit]: the fences that
// contain the point, in id order. A point on a fence's boundary is inside
// it. The answer holds at most limit fences (priced by it) and
// MaxResponseVertices positions; when a cap left fences out it says
// "truncated": true.
func (h *Handler) Contains(w http.ResponseWriter, r *http.Request) {
	q, err := h.parseContains(r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	d := Demand{Kind: KindContains, Layer: q.Layer.name(), Points: 1, Limit: q.Limit, At: []orb.Point{{q.Lng, q.Lat}}}
	if q.Layer != nil {
		d.PieceVertices = q.Layer.PieceVertices
	}
	if !h.gate.AdmitGeofence(w, r, d) {
		return
	}
	fs, truncated, err := h.reader.Contains(r.Context(), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeCollection(w, r, http.StatusOK, fs, func(c *collection) { c.Truncated = truncated })
}

// CheckResult is the answer for one point of a batch check.
type CheckResult struct {
	ID     string  `json:"id"`
	Fences []int64 `json:"fences"` // ids of the fences that contain the point, ascending
}

// Check serves POST /geofence/check with {"points":[{"id","lng","lat"}…]}:
// for every point, in request order, the fences that contain it — one
// query for the whole batch. The answer is {"results":[{"id","fences"}…]}.
func (h *Handler) Check(w http.ResponseWriter, r *http.Request) {
	// What the head says wrong costs nothing, not even a failed-auth
	// token: the query, its layer, its dry_run and the body's media type
	// (jsonBody) are read before the key. A layer not servable yet (503)
	// is the server's state, not bad input: the body's own errors (415 for
	// a content coding, 413…) still go first: parseCheck reports it after
	// them.
	var layer queryLayer
	qs, err := parseQuery(r, checkParams)
	if err == nil {
		_, layer.given = qs["layer"]
		if layer.c, layer.err = qs.containment(h.catalog); clientError(layer.err) {
			err = layer.err
		}
	}
	if err == nil {
		_, err = dryrun.Values(url.Values(qs))
	}
	if err == nil {
		err = jsonBody(w, r)
	}
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	if a, ok := h.gate.(Authenticator); ok && !a.Authenticate(w, r, KindCheck) {
		return
	}
	q, err := h.parseCheck(w, r, layer)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	points := q.Points
	at := make([]orb.Point, len(points))
	for i, p := range points {
		at[i] = orb.Point{p.Lng, p.Lat}
	}
	d := Demand{Kind: KindCheck, Layer: q.Layer.name(), Points: len(points), At: at, PieceVertices: FencePieceVertices}
	if q.Layer != nil {
		d.PieceVertices = q.Layer.PieceVertices
	}
	if !h.gate.AdmitGeofence(w, r, d) {
		return
	}
	ids, err := h.reader.Check(r.Context(), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(ids) != len(points) {
		h.fail(w, r, problem.Wrap(fmt.Errorf("check: %d answers for %d points", len(ids), len(points))))
		return
	}
	out := struct {
		Results []CheckResult `json:"results"`
	}{Results: make([]CheckResult, len(points))}
	for i, p := range points {
		fences := ids[i]
		if fences == nil {
			fences = []int64{}
		}
		out.Results[i] = CheckResult{ID: p.ID, Fences: fences}
	}
	h.writeJSON(w, r, http.StatusOK, "application/json", out)
}

// clientError reports whether err is a problem of the request itself (a
// 4xx).
func clientError(err error) bool {
	var pe *problem.Error
	return errors.As(err, &pe) && problem.Status(pe.Code) < 500
}

// collection is a GeoJSON FeatureCollection, with optional foreign members.
type collection struct {
	Type     string    `json:"type"`
	Features []Feature `json:"features"`
	Next     string    `json:"next,omitempty"` // fence list: the next page
	// Truncated: within, bbox or contains left features out (their caps).
	Truncated bool `json:"truncated,omitempty"`
}

func (h *Handler) writeCollection(w http.ResponseWriter, r *http.Request, status int, fs []Feature, extra func(*collection)) {
	if fs == nil {
		fs = []Feature{}
	}
	c := collection{Type: "FeatureCollection", Features: fs}
	if extra != nil {
		extra(&c)
	}
	h.writeJSON(w, r, status, ContentType, c)
}

// writeJSON encodes v completely before writing anything, so that an
// encoding failure is still a clean 500.
func (h *Handler) writeJSON(w http.ResponseWriter, r *http.Request, status int, contentType string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		h.fail(w, r, problem.Wrap(fmt.Errorf("encode response: %w", err)))
		return
	}
	body = append(body, '\n')
	hdr := w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := problem.From(err)
	level := slog.LevelWarn
	switch {
	case errors.Is(r.Context().Err(), context.Canceled):
		// The client hung up: not a server fault, and nobody reads this
		// response (recorded as 499, server.ClientClosed).
		p = &problem.Error{Code: problem.Unavailable, Detail: "request cancelled", Err: err}
		level = slog.LevelInfo
	case p.Code == problem.Internal:
		level = slog.LevelError
	case p.Code == problem.NotFound, p.Code == problem.OutOfRange:
		level = slog.LevelInfo
	}
	var stopping *pgcall.Stopping
	h.log.LogAttrs(r.Context(), level, "geofence request failed",
		slog.String("path", apikeys.RedactPath(r.URL.Path)), slog.String("code", string(p.Code)), slog.Any("err", err),
		slog.Bool("db_still_running", errors.As(err, &stopping)))
	// A statement still running behind err is waited for after the
	// answer is sent, so the request — and its in-flight slot — lasts as
	// long as the database works for it.
	pgcall.Respond(w, err, func() { problem.Write(w, r, p) })
}

// wrote tells OnWrite that the fence table changed.
func (h *Handler) wrote() {
	if h.onWrite != nil {
		h.onWrite()
	}
}

func refuserOf(a Authorizer) func(http.ResponseWriter, *http.Request) {
	if rf, ok := a.(AdminRefuser); ok {
		return rf.RefuseAdmin
	}
	return nil
}
