package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// ServerTimer measures a tile's database time as the server itself spends
// it, whatever SQL that build runs: the execution time pg_stat_statements
// adds up for the server's role while the server answers one real request
// for the tile (the median of Runs requests). The requests must come one at
// a time, from this timer only, with the server's tile cache off.
//
// PostgreSQL records a statement when it ends, and never one that failed:
// a tile the server cut off at its statement timeout (a 503 of problem type
// timeout) counts as timed out, at the time the request took; one it
// refused or failed otherwise is an error, and so is one it answered from
// its tile cache (a *CacheHitError: no statement ran).
type ServerTimer struct {
	Client *Client
	// Stats reads pg_stat_statements of every role (a member of
	// pg_read_all_stats, such as the schema owner of scripts/services.sh).
	Stats   *pgxpool.Pool
	Role    string        // the server's database role, default "geotoll_reader"
	Runs    int           // default 3
	Quiesce time.Duration // wait for the server's straggling statements first, as TileTimer
}

// String describes the timing.
func (st ServerTimer) String() string {
	return fmt.Sprintf("the server's own statements (pg_stat_statements of %s), median of %d requests", st.role(), max(st.Runs, 1))
}

func (st ServerTimer) role() string {
	if st.Role == "" {
		return "geotoll_reader"
	}
	return st.Role
}

// Time requests the tile Runs times and returns the median database time.
func (st ServerTimer) Time(ctx context.Context, l *tiles.Layer, t maptile.Tile) (Timing, error) {
	if err := st.Client.check(); err != nil {
		return Timing{}, err
	}
	var ms []float64
	var out Timing
	for range max(st.Runs, 1) {
		if err := quiesce(ctx, st.Stats, st.role(), st.Quiesce); err != nil {
			return out, err
		}
		before, err := st.spent(ctx)
		if err != nil {
			return out, err
		}
		r, err := st.Client.Tile(ctx, l.Name, t)
		if err != nil {
			return out, err
		}
		switch {
		case r.CacheHit:
			return out, &CacheHitError{Path: TilePath(l.Name, t)}
		case r.TimedOut(): // the server gave up at its statement timeout: at least that long
			return Timing{MS: float64(r.Took.Microseconds()) / 1000, Censored: true}, nil
		case !r.Drawn(): // refused, or failed: no database time to read
			return out, fmt.Errorf("loadtest: tile %s %v answered %s: no database time measured", l.Name, t, r.Answer())
		}
		after, err := st.spent(ctx)
		if err != nil {
			return out, err
		}
		ms = append(ms, after-before)
		out.Bytes, out.Features = r.Bytes, r.Features
	}
	out.MS = Median(ms)
	return out, nil
}

// spent is the total execution time (ms) pg_stat_statements holds for the
// role in this database, leaving out the API key reloads.
func (st ServerTimer) spent(ctx context.Context) (float64, error) {
	var ms float64
	err := st.Stats.QueryRow(ctx, `SELECT coalesce(sum(s.total_exec_time), 0)
FROM pg_stat_statements AS s JOIN pg_roles AS r ON r.oid = s.userid
WHERE r.rolname = $1 AND s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND s.query NOT LIKE '%api_keys%'`, st.role()).Scan(&ms)
	if err != nil {
		return 0, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return ms, nil
}
