package loadtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// geomSQL is the layer's geometry column as an expression in srid.
func geomSQL(l *tiles.Layer, srid int) string {
	col := "t." + pgx.Identifier{l.GeometryColumn}.Sanitize()
	if l.SRID == srid {
		return col
	}
	return "ST_Transform(" + col + ", " + strconv.Itoa(srid) + ")"
}

// tableSQL is the layer's table, quoted as tiles.Layer does.
func tableSQL(l *tiles.Layer) string {
	if l.Schema != "" {
		return pgx.Identifier{l.Schema, l.Table}.Sanitize()
	}
	return pgx.Identifier(strings.Split(l.Table, ".")).Sanitize()
}

// Anchors returns n lon/lat positions where the layer has data,
// deterministically from seed on the same data: a random vertex of each of
// n random rows (for points, the point itself).
func Anchors(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer, n int, seed uint64) ([]orb.Point, error) {
	out, err := AnchorsOf(ctx, pool, tableSQL(l), geomSQL(l, l.SRID), n, seed)
	if err != nil {
		return nil, fmt.Errorf("anchors of %s: %w", l.Name, err)
	}
	return out, nil
}

// AnchorsOf is Anchors of any relation: table is its quoted name, geom an
// expression of its geometry over alias t, in an SRID PostGIS can
// transform to lon/lat. Both come from configuration, never a request.
func AnchorsOf(ctx context.Context, pool *pgxpool.Pool, table, geom string, n int, seed uint64) ([]orb.Point, error) {
	q := `SELECT ST_X(p), ST_Y(p) FROM (
  SELECT ST_Transform(ST_GeometryN(ST_Points(g), 1 + floor(random() * ST_NPoints(g))::int), 4326) AS p
  FROM (SELECT ` + geom + ` AS g FROM ` + table + ` AS t ORDER BY random() LIMIT $1 OFFSET 0) AS s
  WHERE NOT ST_IsEmpty(g)) AS v`
	var out []orb.Point
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// One process draws the random numbers in scan order, a scan that
		// starts at the table's first page (a synchronised scan of a big
		// table starts where another one is): the same seed on the same
		// table gives the same rows. A whole-table scan may outlast the
		// read role's own statement_timeout.
		if _, err := tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL synchronize_seqscans = off;
			SET LOCAL statement_timeout = '5min'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT setseed($1)`, float64(seed%1000)/1000); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q, n)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanPoint)
		return err
	})
	return out, err
}

// Centroids returns the centre of every row's bounding box in EPSG:3857,
// the input of DenseTiles.
func Centroids(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer) ([]orb.Point, error) {
	var out []orb.Point
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '5min'`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT ST_X(c), ST_Y(c) FROM (SELECT ST_Centroid(ST_Envelope(`+geomSQL(l, 3857)+`)) AS c FROM `+tableSQL(l)+` AS t) AS s WHERE c IS NOT NULL`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanPoint)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("centroids of %s: %w", l.Name, err)
	}
	return out, nil
}

func scanPoint(r pgx.CollectableRow) (orb.Point, error) {
	var p orb.Point
	return p, r.Scan(&p[0], &p[1])
}

// Timer measures one tile's database time; String says how, for reports.
type Timer interface {
	Time(ctx context.Context, l *tiles.Layer, t maptile.Tile) (Timing, error)
	String() string
}

// TileTimer times a layer's own tile query (tiles.Layer.Query, the query
// this source tree's server runs, bound exactly as tiles.Store binds it)
// in PostgreSQL: a read-only transaction with jit off, the median of Runs.
type TileTimer struct {
	Pool    *pgxpool.Pool // the read role, as the server connects
	Runs    int           // default 3
	Timeout time.Duration // statement_timeout of each run, default 10 s
	// Quiesce, when positive, waits up to this long before timing a tile
	// until the read role runs no other statement in the database: a
	// server's query that outlived its request (PostGIS work on huge
	// polygons does not stop at a timeout) must not share the CPU with
	// the timed one.
	Quiesce time.Duration
}

// Timing is one tile's database time.
type Timing struct {
	MS float64 // median of the runs, in milliseconds
	// Censored: a run hit the timeout (MS is then a lower bound, and the
	// other runs were skipped).
	Censored bool
	Bytes    int // the MVT layer's size
	Features int // and its features
}

// String describes the timing.
func (tt TileTimer) String() string {
	return fmt.Sprintf("the layer's SQL as the read role, median of %d, jit off, timeout %s", max(tt.Runs, 1), tt.Timeout)
}

// Time runs the layer's query for tile t.
func (tt TileTimer) Time(ctx context.Context, l *tiles.Layer, t maptile.Tile) (Timing, error) {
	runs, timeout := tt.Runs, tt.Timeout
	if runs < 1 {
		runs = 3
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if err := quiesce(ctx, tt.Pool, "", tt.Quiesce); err != nil {
		return Timing{}, err
	}
	var ms []float64
	var tile []byte
	for range runs {
		b, took, err := tt.run(ctx, l, t, timeout)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "57014" { // statement_timeout
			return Timing{MS: float64(took.Microseconds()) / 1000, Censored: true}, nil
		}
		if err != nil {
			return Timing{}, fmt.Errorf("time %s %s: %w", l.Name, tileName(t), err)
		}
		ms = append(ms, float64(took.Microseconds())/1000)
		tile = b
	}
	out := Timing{MS: Median(ms), Bytes: len(tile)}
	layers, err := mvt.Unmarshal(tile)
	if err != nil {
		return out, fmt.Errorf("time %s %s: not a tile: %w", l.Name, tileName(t), err)
	}
	for _, ml := range layers {
		out.Features += len(ml.Features)
	}
	return out, nil
}

// run times one query in its own read-only transaction, under the
// settings the server's tile reads use.
func (tt TileTimer) run(ctx context.Context, l *tiles.Layer, t maptile.Tile, timeout time.Duration) ([]byte, time.Duration, error) {
	sql, args := l.Query(t)
	var b []byte
	var level int
	var took time.Duration
	err := pgx.BeginTxFunc(ctx, tt.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, tiles.ReadSettingsSQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`,
			strconv.FormatInt(timeout.Milliseconds(), 10)); err != nil {
			return err
		}
		start := time.Now()
		err := tx.QueryRow(ctx, sql, args...).Scan(&b, &level)
		took = time.Since(start)
		return err
	})
	return b, took, err
}

// quiesce waits, up to limit, until no session of role (empty: the
// pool's own) runs a statement in this database that started within limit,
// other than the asking one.
func quiesce(ctx context.Context, pool *pgxpool.Pool, role string, limit time.Duration) error {
	if limit <= 0 {
		return nil
	}
	deadline := time.Now().Add(limit)
	for {
		// A statement older than the wait itself is a straggler that
		// waiting again would not outlast: it is let be.
		var busy int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE usename = coalesce(nullif($2, ''), current_user) AND datname = current_database() AND state = 'active'
  AND pid <> pg_backend_pid() AND query_start > now() - make_interval(secs => $1)`, limit.Seconds(), role).Scan(&busy)
		if err != nil || busy == 0 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Median of xs (the mean of the middle two for an even count); 0 when empty.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
