package pricing

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/density"
)

// Builds is how many models Models builds at once. A build reads a whole
// relation: every relation's build at once (32 on the open data) held all
// 16 connections of the server's pool for 20 s, when builds and requests
// shared it, and requests waiting for one answered 503. geotoll serve now
// builds on a pool of its own (database.background_conns), which Builds
// leaves room in for the server's other work.
const Builds = 4

// limitedDB lets at most cap(sem) transactions run at once on db.
type limitedDB struct {
	db  density.DB
	sem chan struct{}
}

func (l limitedDB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	tx, err := l.db.BeginTx(ctx, opts)
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedTx{Tx: tx, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

// limitedTx gives its slot back when it ends.
type limitedTx struct {
	pgx.Tx
	release func()
}

func (t *limitedTx) Commit(ctx context.Context) error {
	defer t.release()
	return t.Tx.Commit(ctx)
}

func (t *limitedTx) Rollback(ctx context.Context) error {
	defer t.release()
	return t.Tx.Rollback(ctx)
}
