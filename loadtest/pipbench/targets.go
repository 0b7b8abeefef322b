package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"

	queries "github.com/geotoll/geotoll/sql"
)

// geotollTarget checks through POST /geofence/check?layer=…, one
// keep-alive connection per checker.
func geotollTarget(base, key, layer string) target {
	u := strings.TrimRight(base, "/") + "/geofence/check?layer=" + url.QueryEscape(layer)
	return target{name: "geotoll", open: func(context.Context) (checker, error) {
		tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true}
		return &httpChecker{client: &http.Client{Transport: tr}, url: u, key: key}, nil
	}}
}

type httpChecker struct {
	client   *http.Client
	url, key string
}

func (h *httpChecker) check(ctx context.Context, pts []point) ([][]int64, error) {
	var body bytes.Buffer
	body.WriteString(`{"points":[`)
	for i, p := range pts {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"id":"%d","lng":%s,"lat":%s}`, i,
			strconv.FormatFloat(p.Lng, 'g', -1, 64), strconv.FormatFloat(p.Lat, 'g', -1, 64))
	}
	body.WriteString(`]}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, &body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", h.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return nil, &refusal{fmt.Sprintf("geotoll: %s: %.300s", resp.Status, b)}
	default:
		return nil, fmt.Errorf("geotoll: %s: %.300s", resp.Status, b)
	}
	var r struct {
		Results []struct {
			Fences []int64 `json:"fences"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if len(r.Results) != len(pts) {
		return nil, fmt.Errorf("geotoll: %d results for %d points", len(r.Results), len(pts))
	}
	out := make([][]int64, len(pts))
	for i, res := range r.Results {
		out[i] = res.Fences
		slices.Sort(out[i])
	}
	return out, nil
}

func (h *httpChecker) Close() error {
	h.client.CloseIdleConnections()
	return nil
}

// rawSQL is geotoll's check statement (sql/geofence_layer_check.sql) on
// the source table itself: every point against the whole polygons, same
// boundary rule (ST_Covers), the table's id and geom in EPSG:4326.
func rawSQL(table string) (string, error) {
	t, err := template.New("geofence_layer_check.sql").Parse(queries.MustRead("geofence_layer_check.sql"))
	if err != nil {
		return "", err
	}
	var text strings.Builder
	err = t.Execute(&text, struct {
		Table, ID, Geom string
		Mercator        bool
	}{pgx.Identifier(strings.Split(table, ".")).Sanitize(), "id", "geom", false})
	return text.String(), err
}

func rawTarget(dsn, table string) target {
	sql, err := rawSQL(table)
	if err != nil {
		return target{name: "raw", open: func(context.Context) (checker, error) { return nil, err }}
	}
	return target{name: "raw", open: func(ctx context.Context) (checker, error) {
		c, err := connect(ctx, dsn)
		if err != nil {
			return nil, err
		}
		return &pgChecker{conn: c, sql: sql}, nil
	}}
}

// connect opens a session without statement_timeout: a check of whole
// polygons, or the export of them all, may take longer than a role's
// default allows.
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["statement_timeout"] = "0"
	return pgx.ConnectConfig(ctx, cfg)
}

type pgChecker struct {
	conn *pgx.Conn
	sql  string
}

func (p *pgChecker) check(ctx context.Context, pts []point) ([][]int64, error) {
	lngs, lats := make([]float64, len(pts)), make([]float64, len(pts))
	for i, pt := range pts {
		lngs[i], lats[i] = pt.Lng, pt.Lat
	}
	rows, err := p.conn.Query(ctx, p.sql, lngs, lats)
	if err != nil {
		return nil, err
	}
	out := make([][]int64, len(pts))
	for i := range out {
		out[i] = []int64{}
	}
	var ord, id int64
	_, err = pgx.ForEachRow(rows, []any{&ord, &id}, func() error {
		out[ord-1] = append(out[ord-1], id)
		return nil
	})
	return out, err
}

func (p *pgChecker) Close() error { return p.conn.Close(context.Background()) }

// tile38Target asks INTERSECTS … IDS POINT lat lng, a batch pipelined per
// round trip.
func tile38Target(addr, collection string) target {
	return target{name: "tile38", open: func(ctx context.Context) (checker, error) {
		c, err := dialResp(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &tile38Checker{resp: c, collection: collection}, nil
	}}
}

type tile38Checker struct {
	*resp
	collection string
}

func (t *tile38Checker) check(_ context.Context, pts []point) ([][]int64, error) {
	for _, p := range pts {
		t.send("INTERSECTS", t.collection, "IDS", "POINT",
			strconv.FormatFloat(p.Lat, 'g', -1, 64), strconv.FormatFloat(p.Lng, 'g', -1, 64))
	}
	if err := t.w.Flush(); err != nil {
		return nil, err
	}
	out := make([][]int64, len(pts))
	for i := range pts {
		v, err := t.read()
		if err != nil {
			return nil, err
		}
		// [cursor, [id, …]]
		a, ok := v.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("tile38: unexpected answer %v", v)
		}
		ids, _ := a[1].([]any)
		out[i] = []int64{}
		for _, id := range ids {
			s, _ := id.(string)
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("tile38: id %v: %w", id, err)
			}
			out[i] = append(out[i], n)
		}
		slices.Sort(out[i])
	}
	return out, nil
}

// loadTile38 fills collection with every row of table: SET collection id
// OBJECT geojson.
func loadTile38(ctx context.Context, addr, collection, dsn, table string) error {
	db, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	r, err := dialResp(ctx, addr)
	if err != nil {
		return err
	}
	defer r.Close()
	r.send("DROP", collection)
	if err := r.roundTrip(); err != nil {
		return err
	}
	rows, err := db.Query(ctx, fmt.Sprintf("SELECT id::text, ST_AsGeoJSON(geom, 15) FROM %s ORDER BY id",
		pgx.Identifier(strings.Split(table, ".")).Sanitize()))
	if err != nil {
		return err
	}
	var id, geojson string
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &geojson}, func() error {
		n++
		r.send("SET", collection, id, "OBJECT", geojson)
		return r.roundTrip()
	})
	fmt.Printf("tile38: loaded %d objects into %s\n", n, collection)
	return err
}

// resp is a minimal RESP2 client.
type resp struct {
	conn net.Conn
	w    *bufio.Writer
	r    *bufio.Reader
}

func dialResp(ctx context.Context, addr string) (*resp, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &resp{conn: c, w: bufio.NewWriterSize(c, 1<<16), r: bufio.NewReaderSize(c, 1<<16)}, nil
}

func (c *resp) Close() error { return c.conn.Close() }

func (c *resp) send(args ...string) {
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
}

func (c *resp) roundTrip() error {
	if err := c.w.Flush(); err != nil {
		return err
	}
	_, err := c.read()
	return err
}

// read reads one reply: strings and bulk strings as string, integers as
// int64, arrays as []any; an error reply is an error.
func (c *resp) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("resp: empty line")
	}
	switch body := line[1:]; line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, fmt.Errorf("resp: %s", body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		a := make([]any, 0, max(n, 0))
		for range n {
			v, err := c.read()
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	}
	return nil, fmt.Errorf("resp: unexpected %q", line)
}

// refusal is an answer that refuses one request (a geotoll 429 or 503):
// the run counts it and goes on.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refused(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}
