package tiles

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/problem"
)

// ContentType is the media type of a Mapbox Vector Tile.
const ContentType = "application/vnd.mapbox-vector-tile"

// Demand describes what a tile request asks of the database, so that the
// Gate can price it before anything runs.
type Demand struct {
	Layers []*Layer
	Tile   maptile.Tile
}

// Gate admits or refuses a priced request. When it refuses, it has written
// the response (429, 401…) itself. It sets budget headers on w either way.
type Gate interface {
	AdmitTile(w http.ResponseWriter, r *http.Request, d Demand) bool
}

// Renderer renders tiles; *Store is the production one.
type Renderer interface {
	Tile(ctx context.Context, layers []*Layer, t maptile.Tile) ([]byte, error)
}

// Handler serves GET /tiles/{layer}/{z}/{x}/{y}.mvt.
type Handler struct {
	Catalog *Catalog
	Store   Renderer
	Gate    Gate
	Logger  *slog.Logger
}

// Route vars the handler reads (see server's router).
const (
	VarLayer = "layer"
	VarZ     = "z"
	VarX     = "x"
	VarY     = "y" // "{y}.mvt" or "{y}.pbf"
)

// Request is a parsed, validated tile request.
type Request struct {
	Layers []*Layer
	Tile   maptile.Tile
}

// ParseRequest validates a tile address: layer list, z, x and "{y}.{ext}".
// Errors are problems: 400 malformed, 404 unknown layer or format, 422 out
// of range (including a zoom outside a layer's minzoom..maxzoom).
func (c *Catalog) ParseRequest(layer, z, x, yext string) (Request, error) {
	ys, err := SplitFormat(yext)
	if err != nil {
		return Request{}, err
	}
	t, err := ParseTile(z, x, ys)
	if err != nil {
		return Request{}, err
	}
	layers, err := c.Resolve(layer)
	if err != nil {
		return Request{}, err
	}
	for _, l := range layers {
		if !l.ZoomInRange(t.Z) {
			return Request{}, problem.Range("z", "layer %q is served at zoom %d..%d, not %d", l.Name, l.MinZoom, l.MaxZoom, t.Z)
		}
	}
	return Request{Layers: layers, Tile: t}, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	req, err := h.Catalog.ParseRequest(vars[VarLayer], vars[VarZ], vars[VarX], vars[VarY])
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	if !h.Gate.AdmitTile(w, r, Demand(req)) {
		return
	}
	tile, err := h.Store.Tile(r.Context(), req.Layers, req.Tile)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	hdr := w.Header()
	if len(tile) == 0 {
		// An empty tile is 204 No Content (as martin does): MapLibre,
		// OpenLayers and Leaflet all draw it as an empty tile.
		hdr.Set("Cache-Control", "public, max-age=60")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	hdr.Set("Content-Type", ContentType)
	hdr.Set("Content-Length", strconv.Itoa(len(tile)))
	hdr.Set("Cache-Control", "public, max-age=60")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(tile)
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := problem.From(err)
	level := slog.LevelWarn
	if p.Code == problem.Internal {
		level = slog.LevelError
	}
	h.logger().LogAttrs(r.Context(), level, "tile failed",
		slog.String("path", r.URL.Path), slog.String("code", string(p.Code)), slog.Any("err", err))
	problem.Write(w, r, p)
}

func (h *Handler) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}
