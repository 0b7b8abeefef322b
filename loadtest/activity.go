package loadtest

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ActivitySampler watches the statements one role runs, in
// pg_stat_activity, every Every (100 ms when 0). A role sees its own
// sessions' statements there without any privilege, so the read role's
// pool may watch the read role (Role "": the pool's own role); another
// role needs pg_read_all_stats or a superuser. Application, when set,
// keeps only the sessions of that application_name (a server's pool given
// one in its URL), so that other clients of the role are not counted.
type ActivitySampler struct {
	Pool        *pgxpool.Pool
	Role        string
	Application string
	Every       time.Duration
}

// Activity is what the samples saw.
type Activity struct {
	Samples    int
	MaxRunning int           // the most statements running at once
	Oldest     time.Duration // the longest a statement had run when sampled
}

const activitySQL = `SELECT count(*)::int, coalesce(max(extract(epoch FROM clock_timestamp() - query_start)), 0)::float8
FROM pg_stat_activity
WHERE usename = coalesce(nullif($1, ''), current_user) AND datname = current_database() AND state = 'active'
  AND ($2 = '' OR application_name = $2)
  AND backend_type = 'client backend' AND pid <> pg_backend_pid()`

// Sample samples until ctx ends. An error of a sample taken while ctx
// was still live is returned.
func (s *ActivitySampler) Sample(ctx context.Context) (Activity, error) {
	every := s.Every
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	var a Activity
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var running int
		var oldest float64
		if err := s.Pool.QueryRow(ctx, activitySQL, s.Role, s.Application).Scan(&running, &oldest); err != nil {
			if ctx.Err() != nil {
				return a, nil
			}
			return a, err
		}
		a.Samples++
		a.MaxRunning = max(a.MaxRunning, running)
		a.Oldest = max(a.Oldest, time.Duration(oldest*float64(time.Second)))
		select {
		case <-ctx.Done():
			return a, nil
		case <-tick.C:
		}
	}
}
