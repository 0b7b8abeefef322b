package pgcall_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/testenv"
)

// BenchmarkCancelAcknowledgement keeps AckWait's figures honest: how long
// PostgreSQL takes to acknowledge a cancel request (pgconn's
// CancelRequest: a connection of its own, which the postmaster forks a
// process for) while n other backends keep every CPU busy with a
// CPU-bound statement. An op is one cancel request of a sleeping
// statement; ms-p50 and ms-max are over the sub-benchmark's ops.
//
//	go test -run '^$' -bench CancelAcknowledgement -benchtime 20x ./internal/pgcall
func BenchmarkCancelAcknowledgement(b *testing.B) {
	url := testenv.ReadDatabaseURL(b)
	for _, busy := range []int{0, 16, 32} {
		b.Run("busy="+strconv.Itoa(busy), func(b *testing.B) {
			for range busy {
				c, err := pgx.Connect(b.Context(), url)
				if err != nil {
					b.Fatal(err)
				}
				ran := make(chan struct{})
				// A minute at most, and cancelled (waited for) once the
				// sub-benchmark is over: no backend is left running.
				go func() {
					defer close(ran)
					_, _ = c.Exec(context.Background(), "SET statement_timeout = '60s'")
					_, _ = c.Exec(context.Background(), "SELECT count(*) FROM generate_series(1, 1e11::bigint)")
				}()
				b.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_ = c.PgConn().CancelRequest(ctx)
					<-ran
					_ = c.Close(ctx)
				})
			}
			victim, err := pgx.Connect(b.Context(), url)
			if err != nil {
				b.Fatal(err)
			}
			defer victim.Close(context.Background())
			time.Sleep(time.Second) // the busy statements under way
			acks := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				done := make(chan struct{})
				go func() { _, _ = victim.Exec(context.Background(), "SELECT pg_sleep(10)"); close(done) }()
				time.Sleep(50 * time.Millisecond) // the sleep under way
				start := time.Now()
				actx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
				err := victim.PgConn().CancelRequest(actx)
				cancel()
				acks = append(acks, time.Since(start))
				if err != nil {
					b.Fatalf("cancel request: %v", err)
				}
				<-done
			}
			b.StopTimer()
			slices.Sort(acks)
			b.ReportMetric(float64(acks[len(acks)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(acks[len(acks)-1].Microseconds())/1000, "ms-max")
		})
	}
}
