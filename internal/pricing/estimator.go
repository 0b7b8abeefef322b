package pricing

import (
	"context"
	"fmt"
	"strings"

	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// Estimator answers the toll's question — what does this request read? —
// from the models. Bind it to the layers once at start-up; an estimate is
// a few map and array lookups and the model's own arithmetic: no call, no
// allocation.
type Estimator struct {
	reads  map[string]bool // every relation tracked, by density.Relation.String()
	tiles  map[*tiles.Layer]*[tiles.MaxZoom + 1]tileModel
	layers map[string]*density.Refresher // geofence layers by name
	fences *density.Refresher            // contains and check
}

// TileSource is the relation a tile of a layer reads at a zoom.
type TileSource func(l *tiles.Layer, z maptile.Zoom) (density.Relation, bool)

// NewEstimator tracks, in models, every relation the layers read: each
// tile layer at each of its zooms (source), each geofence layer, and the
// fences, whatever their SRID. A relation in another SRID than 3857 or
// 4326 is modelled in lon/lat (density.Relation.Transformed), and its
// tiles are estimated as a 4326 relation's are: leaving it out would
// price its requests by size for ever, and say so nowhere. One PostGIS
// cannot transform fails its builds, which Models.Status reports as any
// failed build, and its requests are priced by size meanwhile.
func NewEstimator(models *Models, tileLayers []*tiles.Layer, source TileSource, fenceLayers map[string]density.Relation, fences *density.Relation) (*Estimator, error) {
	e := &Estimator{reads: map[string]bool{}, tiles: make(map[*tiles.Layer]*[tiles.MaxZoom + 1]tileModel), layers: make(map[string]*density.Refresher)}
	track := func(rel density.Relation) (*density.Refresher, error) {
		e.reads[rel.String()] = true
		return models.Track(rel)
	}
	for _, l := range tileLayers {
		var byZoom [tiles.MaxZoom + 1]tileModel
		for z := l.MinZoom; z <= l.MaxZoom; z++ {
			rel, ok := source(l, maptile.Zoom(z)) //nolint:gosec // G115: zooms are 0..tiles.MaxZoom, validated with the configuration
			if !ok {
				continue
			}
			r, err := track(rel)
			if err != nil {
				return nil, fmt.Errorf("tile layer %q: %w", l.Name, err)
			}
			byZoom[z] = tileModel{r: r, rel: rel, capped: rel.Kind != density.Point}
		}
		e.tiles[l] = &byZoom
	}
	for name, rel := range fenceLayers {
		r, err := track(rel)
		if err != nil {
			return nil, fmt.Errorf("geofence layer %q: %w", name, err)
		}
		e.layers[name] = r
	}
	if fences != nil {
		r, err := track(*fences)
		if err != nil {
			return nil, fmt.Errorf("fences: %w", err)
		}
		e.fences = r
	}
	return e, nil
}

// ForLayers tracks, in models, every relation the layers read — each tile
// layer at every zoom the relation tiles.Layer.Source names (its table, or
// the overview `geotoll prepare` built for that zoom), each geofence
// layer's table, and the fences (geotoll.geofences) — after one query for
// the geofence layers' geometry kinds, and returns the estimator over
// them. Call it again when the tile catalog's storage changes.
func ForLayers(ctx context.Context, db density.DB, models *Models, tileLayers []*tiles.Layer, fenceLayers []geofence.Layer) (*Estimator, error) {
	tables := make([]pgx.Identifier, len(fenceLayers))
	columns := make([]string, len(fenceLayers))
	for i, l := range fenceLayers {
		tables[i], columns[i] = pgx.Identifier(strings.Split(l.Table, ".")), l.GeometryColumn
	}
	kinds, err := Kinds(ctx, db, tables, columns)
	if err != nil {
		return nil, err
	}
	fenceRel := make(map[string]density.Relation, len(fenceLayers))
	for i, l := range fenceLayers {
		fenceRel[l.Name] = density.Relation{Table: tables[i], GeometryColumn: l.GeometryColumn, SRID: density.SRIDLonLat, Kind: kinds[i]}
	}
	return NewEstimator(models, tileLayers, TileRelation, fenceRel, &Fences)
}

// TileRelation is the relation a tile of l reads at zoom z, as
// tiles.Layer.Source says. A layer whose kind is not known yet (mixed) is
// modelled as polygons, the dearest to read.
func TileRelation(l *tiles.Layer, z maptile.Zoom) (density.Relation, bool) {
	src := l.Source(z)
	if len(src.Relation) == 0 {
		return density.Relation{}, false
	}
	kind := density.Polygon
	switch src.Kind {
	case tiles.KindPoint:
		kind = density.Point
	case tiles.KindLine:
		kind = density.Line
	}
	rel := density.Relation{Table: src.Relation, GeometryColumn: src.GeometryColumn, SRID: src.SRID, Kind: kind}
	// Pieces per row of the layer's table: of an overview, which holds
	// fewer features than the table (the small ones thinned), fewer than
	// per feature, so the cap counts more features than the tile reads.
	if src.Pieces && src.SourceRows > 0 && src.Rows > src.SourceRows {
		rel.PiecesPerRow = float64(src.Rows) / float64(src.SourceRows)
	}
	return rel, true
}

// Reads is every relation the estimator reads models of, by
// density.Relation.String(): what Models.Keep keeps once this estimator
// replaces an older one.
func (e *Estimator) Reads() map[string]bool { return e.reads }

// Fences is the relation contains and check read.
var Fences = density.Relation{Table: pgx.Identifier{"geotoll", "geofences"}, GeometryColumn: "geom", SRID: density.SRIDLonLat, Kind: density.Polygon}

// tileModel is the model a tile of a layer reads at one zoom; capped when
// the query simplifies and encodes at most the layer's feature cap of the
// features it reads (lines and polygons).
type tileModel struct {
	r      *density.Refresher
	rel    density.Relation // what r models
	capped bool
}

// model is r's model, nil when r is nil or not built yet.
func model(r *density.Refresher) *density.Model {
	if r == nil {
		return nil
	}
	return r.Model()
}

// Tile estimates what a tile of l reads: the features in its envelope
// widened by the buffer its query reads (tiles.Layer.BufferMetres: for
// points, the layer's buffer rounded up to whole cluster cells), on the
// relation its zoom reads, and their vertices — for lines and polygons,
// those of at most the layer's feature cap of them (the query reads every
// candidate's box, but simplifies and encodes no more than the cap: the
// estimate scales the vertices down by cap / features). ok is false while
// no model answers.
func (e *Estimator) Tile(l *tiles.Layer, t maptile.Tile) (density.Estimate, bool) {
	byZoom := e.tiles[l]
	if byZoom == nil || int(t.Z) >= len(byZoom) {
		return density.Estimate{}, false
	}
	tm := byZoom[t.Z]
	m := model(tm.r)
	if m == nil {
		return density.Estimate{}, false
	}
	env := tiles.Envelope(t)
	// The buffer the query binds, not the configured one: a point query
	// widens it to whole cluster cells, and reads those rows too.
	pad := l.BufferMetres(t)
	env.Min[0], env.Min[1] = env.Min[0]-pad, env.Min[1]-pad
	env.Max[0], env.Max[1] = env.Max[0]+pad, env.Max[1]+pad
	est := m.Rect(env)
	// The cap takes features (ids: every piece of a capped id is read).
	features := est.Features
	if tm.rel.PiecesPerRow > 1 {
		features /= tm.rel.PiecesPerRow
	}
	if capped := float64(l.MaxFeatures); tm.capped && capped > 0 && features > capped {
		est.Vertices *= capped / features
	}
	return est, true
}

// GeographyVertices is what within reads of a line's or polygon's vertex,
// in the planar vertices bbox reads: within tests each candidate on the
// spheroid twice (ST_DWithin, then ST_Distance for its order), where bbox
// tests it in the plane. Measured on polygons of 1,000 to 300,000
// vertices, the answer's GeoJSON in both: within 0.8–1.1 µs a vertex,
// bbox 0.1–0.2 (ratio 5.5 at 1,000 vertices, 7.9–8.7 from 10,000 on).
// The work models of within and bbox (one per layer, calibrated against
// these same estimates) price a vertex once.
const GeographyVertices = 8

// Geofence estimates what a geofence query reads: the radius circle or the
// box on its layer (within's line and polygon vertices counted as
// GeographyVertices each), the point (or every point of a batch) on the fences or,
// for contains and check on a layer, on that layer's model — each point
// one index probe and the features whose box holds it (see probes). A
// query that tests pieces (Demand.PieceVertices) reads at most two pieces'
// vertices per feature found, however large the polygons the model holds.
func (e *Estimator) Geofence(d geofence.Demand) (density.Estimate, bool) {
	switch d.Kind {
	case geofence.KindWithin:
		if r := e.layers[d.Layer]; model(r) != nil && len(d.At) == 1 {
			est := model(r).Circle(d.At[0], d.RadiusM)
			if r.Relation().Kind != density.Point {
				est.Vertices *= GeographyVertices
			}
			return est, true
		}
	case geofence.KindBBox:
		if m := model(e.layers[d.Layer]); m != nil {
			b := d.Bound
			if b.Max[0] > 180 { // unwrapped across the antimeridian: the model wants minx > maxx
				b.Max[0] -= 360
			}
			return m.BBox(b), true
		}
	case geofence.KindContains, geofence.KindCheck:
		r := e.fences
		if d.Layer != "" {
			r = e.layers[d.Layer]
		}
		if m := model(r); m != nil && len(d.At) > 0 {
			return probes(m, d.At, d.PieceVertices), true
		}
	}
	return density.Estimate{}, false
}

// probes estimates what contains or check reads for points on m: at each
// point, one probe of the index plus the features whose box holds it. The
// probe counts as a feature because it costs about as much as one (an
// index descent, 1–2 µs, like a candidate's fetch): counted as nothing, a
// point in no feature's box would be free, and a batch of points over an
// empty place would cost the query alone however many points it probes.
// calibrate fits the work model to these same estimates, so feature_ms
// prices probes and candidates alike. With pieceVertices (a query that
// tests pieces), a feature found reads at most two pieces (a point on a
// seam tests both), not the whole polygon.
func probes(m *density.Model, at []orb.Point, pieceVertices int) density.Estimate {
	var sum density.Estimate
	for _, p := range at {
		est := m.Point(p)
		if pieceVertices > 0 {
			est.Vertices = min(est.Vertices, 2*est.Features*float64(pieceVertices))
		}
		sum.Features += est.Features + 1
		sum.Vertices += est.Vertices
	}
	return sum
}

// Lazy is an Estimator that arrives later: until Set, it has no estimate
// (the toll prices by size). The server sets it once the database has
// told the relations' geometry kinds.
type Lazy struct{ e atomic.Pointer[Estimator] }

// Set installs e. A relation e reads for a layer's zoom in place of the
// one the estimator it replaces read there (storage rebuilt under a new
// name) is estimated by that one's model until its own is built (see
// density.Refresher.Inherit).
func (l *Lazy) Set(e *Estimator) {
	if prev := l.e.Load(); prev != nil {
		e.inherit(prev)
	}
	l.e.Store(e)
}

// inherit lends each of e's tile relations without a model the model of
// the relation prev read for the same layer and zoom, when that one is an
// earlier build of the same storage (see rebuilt): never the model of a
// table to its overview, of an overview to the table, or across kinds.
func (e *Estimator) inherit(prev *Estimator) {
	for l, byZoom := range e.tiles {
		old := prev.tiles[l]
		if old == nil {
			continue
		}
		for z := range byZoom {
			if n, o := byZoom[z], old[z]; n.r != nil && o.r != nil && n.r != o.r && rebuilt(o.rel, n.rel) {
				n.r.Inherit(o.r)
			}
		}
	}
}

// rebuilt reports whether relation b is a rebuild of relation a by
// `geotoll prepare`: the same schema, geometry column and kind, and the
// same stable name (serving.StableName) under another generation.
func rebuilt(a, b density.Relation) bool {
	return len(a.Table) == 2 && len(b.Table) == 2 && a.Table[0] == b.Table[0] && a.Table[1] != b.Table[1] &&
		serving.StableName(a.Table[1]) == serving.StableName(b.Table[1]) &&
		a.GeometryColumn == b.GeometryColumn && a.Kind == b.Kind && a.SRID == b.SRID
}

// Tile implements toll.Estimator.
func (l *Lazy) Tile(layer *tiles.Layer, t maptile.Tile) (density.Estimate, bool) {
	if e := l.e.Load(); e != nil {
		return e.Tile(layer, t)
	}
	return density.Estimate{}, false
}

// Geofence implements toll.Estimator.
func (l *Lazy) Geofence(d geofence.Demand) (density.Estimate, bool) {
	if e := l.e.Load(); e != nil {
		return e.Geofence(d)
	}
	return density.Estimate{}, false
}
