package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// startFloorServer starts the least tile server BenchmarkCeiling measures
// beside geotoll ("floor"): net/http and a pgx pool of conns connections,
// one handler that reads /tiles/{layer}/{z}/{x}/{y}.mvt, runs the layer's
// query in pgbench's batch (BEGIN READ ONLY, the read settings, the
// layer's statement_timeout, the query, COMMIT) and writes the tile as it
// came: no middleware, no admission, no log, no deadline of its own, no
// compression. What it reaches against pgbench is what a Go server on
// net/http and pgx reaches on the host at all; geotoll's rate over its
// rate is what geotoll's own work costs.
//
// It answers the server's address and a description of its pool's state,
// for a run that failed.
func startFloorServer(b *testing.B, layer *tiles.Layer, conns int32) (string, func() string) {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.ReadDatabaseURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = conns, conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	timeout := strconv.FormatInt(layer.StatementTimeout.Milliseconds(), 10)
	prefix := "/tiles/" + layer.Name + "/"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := floorTile(r.URL.Path, prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		sql, args := layer.Query(t)
		batch := &pgx.Batch{}
		batch.Queue(`BEGIN READ ONLY`)
		batch.Queue(tiles.ReadSettingsSQL)
		batch.Queue(`SELECT set_config('statement_timeout', $1, true)`, timeout)
		batch.Queue(sql, args...)
		batch.Queue(`COMMIT`)
		var mvt []byte
		err := pool.AcquireFunc(r.Context(), func(c *pgxpool.Conn) error {
			br := c.SendBatch(r.Context(), batch)
			for range 3 {
				if _, err := br.Exec(); err != nil {
					br.Close()
					return err
				}
			}
			var level any
			if err := br.QueryRow().Scan(&mvt, &level); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				br.Close()
				return err
			}
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
			return br.Close()
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if len(mvt) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.mapbox-vector-tile")
		w.Header().Set("Content-Length", strconv.Itoa(len(mvt)))
		w.Write(mvt) //nolint:errcheck // the client hung up: nothing to do
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	b.Cleanup(func() { srv.Close() })
	stat := func() string {
		st := pool.Stat()
		return fmt.Sprintf("%d connections, %d acquired, %d acquires cancelled", st.TotalConns(), st.AcquiredConns(), st.CanceledAcquireCount())
	}
	return "http://" + ln.Addr().String(), stat
}

// floorTile parses {z}/{x}/{y}.mvt after prefix, as geotoll parses a
// tile's address (tiles.ParseTile).
func floorTile(path, prefix string) (maptile.Tile, bool) {
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return maptile.Tile{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".mvt")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return maptile.Tile{}, false
	}
	t, err := tiles.ParseTile(parts[0], parts[1], parts[2])
	return t, err == nil
}

func TestFloorTileReadsOnlyItsLayersTiles(t *testing.T) {
	const prefix = "/tiles/places/"
	for _, c := range []struct {
		path string
		want maptile.Tile
		ok   bool
	}{
		{"/tiles/places/14/8800/5373.mvt", maptile.New(8800, 5373, 14), true},
		{"/tiles/places/0/0/0.mvt", maptile.New(0, 0, 0), true},
		{"/tiles/other/0/0/0.mvt", maptile.Tile{}, false},
		{"/tiles/places/1/2/0.mvt", maptile.Tile{}, false}, // x beyond zoom 1
		{"/tiles/places/14/8800/5373.pbf", maptile.Tile{}, false},
		{"/tiles/places/14/8800.mvt", maptile.Tile{}, false},
		{"/tiles/places/14/-1/0.mvt", maptile.Tile{}, false},
		{"/tiles/places/99999999999/0/0.mvt", maptile.Tile{}, false},
		{"/tiles/places/014/0/0.mvt", maptile.Tile{}, false},
		{"/tiles/places/23/0/0.mvt", maptile.Tile{}, false}, // above tiles.MaxZoom
		{"/tiles/places/32/0/0.mvt", maptile.Tile{}, false},
		{"/tiles/places//0/0.mvt", maptile.Tile{}, false},
		{"/tiles/places/1/0/0/0.mvt", maptile.Tile{}, false},
		{"/tiles/placesX/0/0/0.mvt", maptile.Tile{}, false},
	} {
		got, ok := floorTile(c.path, prefix)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("floorTile(%q) = %v, %v; want %v, %v", c.path, got, ok, c.want, c.ok)
		}
	}
}
