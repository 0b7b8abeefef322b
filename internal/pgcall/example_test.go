package pgcall_test

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// A handler reads through a guarded call and answers its error with
// Respond: a statement still running behind the error is waited for after
// the client has its 503.
func Example() {
	cfg, err := pgxpool.ParseConfig("postgres://geotoll_reader@localhost/geotoll")
	if err != nil {
		return
	}
	pgcall.Configure(cfg, time.Minute) // cancel requests, not closed sockets
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return
	}
	db := &pgcall.DB{Pool: pool, AcquireTimeout: time.Second, RetryAfter: 2}

	mux := http.NewServeMux()
	mux.HandleFunc("/count", func(w http.ResponseWriter, r *http.Request) {
		var n int64
		_, err := db.Read(r.Context(), pgcall.Statement{
			SQL: `SELECT count(*) FROM geotoll.places`, Timeout: 2 * time.Second, Scan: pgcall.One(&n),
		})
		if err != nil {
			pgcall.Respond(w, err, func() { problem.Write(w, r, err) })
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}
