package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/testenv"
)

// benchPositions are 1,000 positions for the geofence benchmarks: the first
// 900 demo places (in the cities, where the fences are) and 100 spread over
// the world (mostly in no fence).
func benchPositions(b *testing.B) []geofence.Point {
	b.Helper()
	rows, err := testenv.Pool(b).Query(context.Background(), `
		(SELECT ST_X(geom), ST_Y(geom) FROM geotoll.places ORDER BY id LIMIT 900)
		UNION ALL
		SELECT -180 + i * 3.6, -60 + (i % 100) * 1.2 FROM generate_series(0, 99) AS i`)
	if err != nil {
		b.Fatal(err)
	}
	pts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (geofence.Point, error) {
		var p geofence.Point
		err := row.Scan(&p.Lng, &p.Lat)
		return p, err
	})
	if err != nil || len(pts) != 1000 {
		b.Fatalf("%d positions: %v", len(pts), err)
	}
	for i := range pts {
		pts[i].ID = "v" + strconv.Itoa(i)
	}
	return pts
}

// geofenceBench sends the benchmark's requests to a whole server, each as
// a new client (benchClients), and reads what each answer cost.
type geofenceBench struct {
	b       *testing.B
	base    string
	client  *http.Client
	clients benchClients
}

// do sends a request and decodes its 200 answer into out; it returns the
// request's price (X-Request-Cost).
func (g *geofenceBench) do(method, path string, body []byte, out any) float64 {
	req, err := http.NewRequest(method, g.base+path, bytes.NewReader(body))
	if err != nil {
		g.b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", g.clients.next())
	resp, err := g.client.Do(req)
	if err != nil {
		g.b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		g.b.Fatalf("%s %s: %d %.200s %v", method, path, resp.StatusCode, raw, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			g.b.Fatalf("%s %s: %v", method, path, err)
		}
	}
	cost, err := strconv.ParseFloat(resp.Header.Get("X-Request-Cost"), 64)
	if err != nil {
		g.b.Fatalf("%s %s: X-Request-Cost %q", method, path, resp.Header.Get("X-Request-Cost"))
	}
	return cost
}

// check asks POST /geofence/check about every position: the fences of each
// (ascending) and the batch's price.
func (g *geofenceBench) check(body []byte) ([][]int64, float64) {
	var out struct{ Results []geofence.CheckResult }
	cost := g.do(http.MethodPost, "/geofence/check", body, &out)
	fences := make([][]int64, len(out.Results))
	for i, r := range out.Results {
		fences[i] = r.Fences
	}
	return fences, cost
}

// contains asks GET /geofence/contains about each position in turn: the
// fences of each (sorted) and the sum of the prices.
func (g *geofenceBench) contains(urls []string) ([][]int64, float64) {
	fences := make([][]int64, len(urls))
	total := 0.0
	for i, u := range urls {
		var fc struct{ Features []struct{ ID int64 } }
		total += g.do(http.MethodGet, u, nil, &fc)
		fences[i] = []int64{}
		for _, f := range fc.Features {
			fences[i] = append(fences[i], f.ID)
		}
		slices.Sort(fences[i])
	}
	return fences, total
}

// BenchmarkCheckVersusContains answers the same 1,000 positions two ways,
// over real HTTP to a whole server with the default tiers and prices: one
// POST /geofence/check of 1,000 points, and 1,000 GET /geofence/contains
// calls. Each request is priced and charged to a client of its own (see
// benchClients). Before timing, both sides are run once and must give every
// position the same fences, and the single calls must cost at least the
// batch; tokens/op is what one op was charged. One op
// is the whole 1,000 positions either way, so the ratio of ns/op is what
// batching saves, and the ratio of tokens/op what it costs the caller.
//
//	go test -run '^$' -bench CheckVersusContains -benchmem ./cmd/geotoll
func BenchmarkCheckVersusContains(b *testing.B) {
	g := &geofenceBench{b: b, base: benchServer(b, nil), client: &http.Client{}}
	pts := benchPositions(b)
	body, err := json.Marshal(map[string]any{"points": pts})
	if err != nil {
		b.Fatal(err)
	}
	urls := make([]string, len(pts))
	for i, p := range pts {
		urls[i] = "/geofence/contains?lng=" + strconv.FormatFloat(p.Lng, 'f', -1, 64) + "&lat=" + strconv.FormatFloat(p.Lat, 'f', -1, 64)
	}
	batch, batchCost := g.check(body)
	single, singleCost := g.contains(urls)
	inside := 0
	for i := range pts {
		if !slices.Equal(batch[i], single[i]) {
			b.Fatalf("position %d (%v): check says fences %v, contains %v", i, pts[i], batch[i], single[i])
		}
		if len(batch[i]) > 0 {
			inside++
		}
	}
	if inside == 0 || inside == len(pts) {
		b.Fatalf("%d of %d positions inside a fence: the comparison proves nothing", inside, len(pts))
	}
	if singleCost < batchCost {
		b.Fatalf("1,000 contains calls cost %g tokens, less than the batch of the same positions (%g)", singleCost, batchCost)
	}
	b.Logf("both sides agree on %d positions, %d inside a fence; check costs %g tokens, the contains calls %g", len(pts), inside, batchCost, singleCost)

	sides := []struct {
		name string
		op   func() float64 // one op's price
	}{
		{"check-1000-points", func() float64 { _, cost := g.check(body); return cost }},
		{"contains-1000-calls", func() float64 { _, cost := g.contains(urls); return cost }},
	}
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			tokens := 0.0
			for b.Loop() {
				tokens += side.op()
			}
			b.ReportMetric(tokens/float64(b.N), "tokens/op")
		})
	}
}
