package tiles_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// holdProbe holds the batch of Store.Render's projection probe (the read
// that asks whether a layer's filter box can be transformed) before it is
// sent, until release is closed: as a statement that has not stopped when
// its call answers (a cancel request a busy server acknowledges late),
// its call outlives its caller.
type holdProbe struct {
	held    chan struct{}
	release chan struct{}
}

func (h *holdProbe) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		if strings.HasSuffix(strings.TrimSpace(q.SQL), "IS NOT NULL") && strings.Contains(q.SQL, "buffer_m") {
			close(h.held)
			<-h.release
			break
		}
	}
	return ctx
}

func (h *holdProbe) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (h *holdProbe) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (h *holdProbe) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (h *holdProbe) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A tile whose transform failed is probed for layers outside their
// projection; a probe whose statement has not stopped when Render answers
// (its caller went away) is in Render's error as a pgcall.Stopping, so
// that the request waits for it before it ends (pgcall.Respond) and its
// database time is metered by then: it was dropped, and the request ended
// — its in-flight slot freed, its price settled — while the probe still
// held its connection.
func TestStoreRenderWaitsForAProbeStillRunning(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.bng (id bigint PRIMARY KEY, geom geometry(Point, 27700))`)
	f.exec(t, `INSERT INTO {s}.bng VALUES (1, ST_SetSRID(ST_MakePoint(530000, 180000), 27700))`)
	f.exec(t, `GRANT SELECT ON {s}.bng TO geotoll_reader`)
	cat := newCatalog(t, tiles.Layer{Name: "bng", Table: f.table("bng"), GeometryColumn: "geom", SRID: 27700,
		GeometryKind: tiles.KindPoint, Overviews: tiles.Overviews{Off: true}})
	probe := &holdProbe{held: make(chan struct{}), release: make(chan struct{})}
	cfg := testenv.PoolConfig(t, testenv.ReadDatabaseURL(t))
	cfg.ConnConfig.Tracer = probe
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	released := false
	defer func() {
		if !released {
			close(probe.release)
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	layers, answered := resolve(t, cat, "bng"), make(chan error, 1)
	go func() {
		_, err := tiles.NewStore(pool).Render(ctx, layers, maptile.New(2, 3, 3)) // west of the grid's domain
		answered <- err
	}()
	select {
	case <-probe.held: // the tile's read failed; its probe is under way
	case err := <-answered:
		t.Fatalf("Render answered %v without probing the layer's projection", err)
	}
	cancel() // the client goes away
	err = testenv.Receive(t, answered, "Render to answer once its caller went away")
	var stopping *pgcall.Stopping
	if !errors.As(err, &stopping) {
		t.Errorf("Render answered %v while its probe still ran: want a pgcall.Stopping to wait for", err)
	}
	waited := make(chan struct{})
	go func() { pgcall.WaitStopped(err); close(waited) }()
	close(probe.release)
	released = true
	testenv.Receive(t, waited, "the probe to stop once released")
}
