package tiles

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"
)

var param = regexp.MustCompile(`\$(\d+)`)

// maxParam is the highest $n a query binds.
func maxParam(sql string) int {
	n := 0
	for _, m := range param.FindAllStringSubmatch(sql, -1) {
		v, _ := strconv.Atoi(m[1])
		n = max(n, v)
	}
	return n
}

func prepared(t *testing.T, l Layer) *Layer {
	t.Helper()
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	return &l
}

// overviewRows is a registry as `geotoll prepare` writes it for l's band:
// each zoom's cluster grid, its simplification (lines and polygons) and
// the order that chose each cell's feature (see serving's Overview).
func overviewRows(l *Layer, kind Kind, lo, hi int) []Storage {
	var out []Storage
	for z := lo; z <= hi; z++ {
		g := l.Generalize.At(maptile.Zoom(z), l.Extent)
		p := StorageParams{Version: 1, Zoom: z, CellsPerTile: g.CellsPerTile, CellMetres: g.CellMetres, OrderBy: l.OrderBy}
		if kind != KindPoint {
			p.ToleranceMetres, p.MinSizeMetres = g.ToleranceMetres, g.MinSizeMetres
		}
		out = append(out, Storage{
			Layer: l.Name, Builder: BuilderOverview, Relation: l.Name + "_ov_z" + strconv.Itoa(z), ZoomMin: z, ZoomMax: z,
			GeometryColumn: "geom", SRID: 3857, Kind: kind, Columns: l.Columns(), Rows: int64(100 * z),
			Params:  p,
			BuiltAt: time.Unix(int64(z), 0),
		})
	}
	return out
}

// Every query a layer may run binds exactly the arguments its zoom's args
// provide, for every kind, SRID and zoom, from the table or an overview.
func TestQueryArgsMatchTheirSQL(t *testing.T) {
	t.Parallel()
	for _, kind := range []Kind{KindPoint, KindLine, KindPolygon, KindMixed} {
		// cluster_px 16: cells of 128 units, wider than the buffer of 64.
		for _, c := range []struct{ srid, clusterPx int }{{3857, 0}, {4326, 0}, {3857, 16}} {
			srid := c.srid
			l := prepared(t, Layer{Name: "l", Table: "s.t", GeometryColumn: "g", SRID: srid, GeometryKind: kind,
				Properties: []string{"name"}, OrderBy: []string{"rank desc"}, Generalize: Generalize{ClusterPixels: c.clusterPx}})
			p, skipped, err := l.newPlan(kind, overviewRows(l, kind, 0, 7))
			if err != nil || len(skipped) != 0 {
				t.Fatalf("%s: %v %v", kind, err, skipped)
			}
			l.state.plan.Store(p)
			for z := maptile.Zoom(0); z <= MaxZoom; z++ {
				sql, args := l.Query(maptile.New(0, 0, z))
				if got := maxParam(sql); got != len(args) {
					t.Errorf("%s %d z%d: the query binds $%d, args has %d", kind, srid, z, got, len(args))
				}
				if src := l.Source(z); (src.Builder == BuilderOverview) != (z <= 7) {
					t.Errorf("%s z%d reads %+v", kind, z, src)
				}
				if kind == KindPoint {
					// The buffer is read in whole cells: at least the
					// configured buffer, less than it plus a cell.
					g := l.Source(z).Generalization
					bufM := TileWidth(z) * float64(l.Buffer) / float64(l.Extent)
					if got := args[6].(float64); got < bufM || got >= bufM+g.CellMetres {
						t.Errorf("z%d: buffer %v m, want whole cells from %v m", z, got, bufM)
					}
					// ST_AsMVTGeom clips to the same cells, in tile units
					// rounded up.
					units := args[6].(float64) / TileWidth(z) * float64(l.Extent)
					if got := float64(args[5].(int)); got < units || got >= units+1 {
						t.Errorf("z%d: clip buffer %v units, want the %v units of the cells read", z, got, units)
					}
				}
			}
		}
	}
}

func TestPlanChoosesStorage(t *testing.T) {
	t.Parallel()
	l := prepared(t, Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPoint, Properties: []string{"name"}})
	rows := overviewRows(l, KindPoint, 0, 7)
	wide := rows[3]
	wide.Relation, wide.ZoomMin, wide.ZoomMax = "wide", 0, 10 // wider: loses where a per-zoom overview serves
	foreign := rows[0]
	foreign.Relation, foreign.Builder = "foreign", "tin"
	pieces := rows[4]
	pieces.Relation, pieces.Builder = "pieces", BuilderSubdivide
	points := rows[1]
	points.Relation, points.Kind = "lines", KindLine
	stale := rows[2]
	stale.Relation, stale.Columns = "stale", []string{"id"}
	p, skipped, err := l.newPlan(KindPoint, append(rows, wide, foreign, pieces, points, stale))
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 4 {
		t.Errorf("skipped %v, want the unknown builder, pieces of points, the other kind and the missing column", skipped)
	}
	for _, want := range []string{`builder "tin"`, "pieces serve only line and polygon layers", "holds line geometries", `lacks column "name"`} {
		found := false
		for _, err := range skipped {
			found = found || strings.Contains(err.Error(), want)
		}
		if !found {
			t.Errorf("no warning says %q: %v", want, skipped)
		}
	}
	l.state.plan.Store(p)
	for z, want := range map[maptile.Zoom]string{0: "p_ov_z0", 7: "p_ov_z7", 8: "wide", 10: "wide", 11: "t", 22: "t"} { // rows cover z0–z7 only
		src := l.Source(z)
		if got := src.Relation[len(src.Relation)-1]; got != want {
			t.Errorf("z%d reads %s, want %s", z, got, want)
		}
	}
	if src := l.Source(3); src.Rows != 300 || !src.BuiltAt.Equal(time.Unix(3, 0)) || !src.Clustered || src.GeometryColumn != "geom" ||
		src.SRID != 3857 || src.Generalization.CellsPerTile != 64 {
		t.Errorf("z3 source %+v", src)
	}
	if src := l.Source(14); src.Builder != "" || src.Clustered || src.Generalization.On || src.SRID != 3857 || src.GeometryColumn != "g" {
		t.Errorf("z14 source %+v", src)
	}
	if sums := l.StorageSummary(); len(sums) != 1 || sums[0].Relations != 9 || sums[0].MinZoom != 0 || sums[0].MaxZoom != 10 {
		t.Errorf("summary %+v", sums)
	}
}

// A layer reads its line and polygon overviews as they were stored:
// whole (no max_vertices: older builds, or subdivide off) or in pieces,
// joined back on the overview's feature number, whatever its own
// subdivide setting asks the next build for; both bind the same
// arguments.
func TestPlanReadsOverviewsWholeOrInPieces(t *testing.T) {
	t.Parallel()
	for _, kind := range []Kind{KindLine, KindPolygon} {
		for _, off := range []bool{false, true} {
			l := prepared(t, Layer{Name: "l", Table: "s.t", GeometryColumn: "g", GeometryKind: kind,
				Properties: []string{"name"}, Subdivide: Subdivide{Off: off}})
			if want := map[bool]int{false: DefaultSubdivideMaxVertices, true: 0}[off]; l.OverviewParams(kind, 5).MaxVertices != want {
				t.Errorf("%s, subdivide off %v: a build is asked for pieces of %d vertices, want %d", kind, off, l.OverviewParams(kind, 5).MaxVertices, want)
			}
			rows := overviewRows(l, kind, 0, 7)
			for i := 4; i <= 7; i++ {
				rows[i].Params.MaxVertices = 256
			}
			p, skipped, err := l.newPlan(kind, rows)
			if err != nil || len(skipped) != 0 {
				t.Fatalf("%s: %v %v", kind, err, skipped)
			}
			l.state.plan.Store(p)
			for z := maptile.Zoom(0); z <= 7; z++ {
				src, sql := l.Source(z), l.SQL(z)
				inPieces := z >= 4
				if src.Builder != BuilderOverview || src.Pieces != inPieces ||
					strings.Contains(sql, `t."fid" = k.fid`) != inPieces || strings.Contains(sql, `t."box" AS box`) != inPieces {
					t.Errorf("%s, subdivide off %v, z%d: reads %+v, pieces joined on fid %v, want %v",
						kind, off, z, src, strings.Contains(sql, `t."fid" = k.fid`), inPieces)
				}
				if got := strings.Contains(sql, "ST_LineMerge"); got != (inPieces && kind == KindLine) {
					t.Errorf("%s z%d: lines merged %v", kind, z, got)
				}
				if _, args := l.Query(maptile.New(0, 0, z)); maxParam(sql) != len(args) {
					t.Errorf("%s z%d: the query binds $%d, args has %d", kind, z, maxParam(sql), len(args))
				}
			}
		}
	}
}

// A tile query reads an overview's columns by the names the registry
// lists in its columns, each holding the layer's column
// StorageParams.SourceColumns names at the same index, whatever their
// order, and by their own names when it records none (overviews of
// version 1); storage recording source columns for other columns than it
// lists is not read.
func TestPlanReadsStoredColumns(t *testing.T) {
	t.Parallel()
	for _, kind := range []Kind{KindPoint, KindPolygon} {
		l := prepared(t, Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: kind,
			Properties: []string{"name", "cx"}, OrderBy: []string{"rank desc"}})
		if got := l.CarriedColumns(); strings.Join(got, ",") != "c0,c1,c2,c3" { // id, name, cx, rank
			t.Fatalf("carried columns %q", got)
		}
		rows := overviewRows(l, kind, 0, 3)
		rows[1].Columns, rows[1].Params.SourceColumns = l.CarriedColumns(), l.Columns()
		// Recorded in another order, stored under other names.
		rows[2].Columns, rows[2].Params.SourceColumns = []string{"s3", "s2", "s1", "s0"}, []string{"rank", "cx", "name", "id"}
		rows[3].Params.SourceColumns = []string{"id"}
		p, skipped, err := l.newPlan(kind, rows)
		if err != nil {
			t.Fatal(err)
		}
		if len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "p_ov_z3") {
			t.Errorf("%s: skipped %v, want p_ov_z3 (one source column for 4 columns)", kind, skipped)
		}
		for z, want := range map[int][]string{
			0: {`t."id" AS c0`, `t."name" AS c1`, `t."cx" AS c2`, `t."rank" AS c3`},
			1: {`t."c0" AS c0`, `t."c1" AS c1`, `t."c2" AS c2`, `t."c3" AS c3`},
			2: {`t."s0" AS c0`, `t."s1" AS c1`, `t."s2" AS c2`, `t."s3" AS c3`},
		} {
			sql := p.zooms[z].sql
			if kind != KindPoint {
				// The scan that reads the relation orders it by its own
				// columns.
				want = append(want, map[int]string{0: `t."rank" DESC NULLS LAST, t."id" ASC`, 1: `t."c3" DESC NULLS LAST, t."c0" ASC`,
					2: `t."s3" DESC NULLS LAST, t."s0" ASC`}[z])
			}
			// Features carry every property under its own name.
			want = append(want, `.c1 AS "name"`, `.c2 AS "cx"`)
			for _, w := range want {
				if !strings.Contains(sql, w) {
					t.Errorf("%s z%d: query lacks %q:\n%s", kind, z, w, sql)
				}
			}
		}
	}
}
