package pgcall

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// worker is the goroutine a Configure'd connection runs its calls on: one
// per connection, from its first call until the pool closes it. A call
// still runs on a goroutine of its own — its caller can answer by its
// deadline whatever the backend does — but not on a new one each time: a
// new goroutine would grow its stack, call after call, to the depth of
// pgx's batch code, and that copying was a measurable share of a tile's
// CPU. The connection is held by one call at a time, so a worker has at
// most the end of the previous call (after it released the connection)
// and the next one to run.
type worker struct{ jobs chan func() }

const workerKey = "geotoll/pgcall.worker"

func (w *worker) loop() {
	for job := range w.jobs {
		job()
	}
}

// goOn runs job on conn's worker, starting it on first use, when conn
// belongs to a Configure'd pool (see stopWorker); else on a new goroutine.
// The caller holds conn.
func goOn(conn *pgx.Conn, job func()) {
	data := conn.PgConn().CustomData()
	if _, configured := data[cancellerKey]; !configured {
		go job()
		return
	}
	w, _ := data[workerKey].(*worker)
	if w == nil {
		w = &worker{jobs: make(chan func(), 1)}
		data[workerKey] = w
		go w.loop()
	}
	w.jobs <- job
}

// stopWorker ends the worker of a connection the pool closes: nobody holds
// it any more, so no job is sent to it after this.
func stopWorker(pc *pgconn.PgConn) {
	if w, _ := pc.CustomData()[workerKey].(*worker); w != nil {
		close(w.jobs)
		delete(pc.CustomData(), workerKey)
	}
}

// chainBeforeClose makes cfg stop a connection's worker when the pool
// closes the connection, after the hook cfg already had.
func chainBeforeClose(cfg *pgxpool.Config) {
	prev := cfg.BeforeClose
	cfg.BeforeClose = func(c *pgx.Conn) {
		if prev != nil {
			prev(c)
		}
		stopWorker(c.PgConn())
	}
}
