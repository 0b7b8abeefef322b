package loadtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// pgbenchParams name the tile query's bound parameters $1..$9 in order
// (see sql/tile.sql): pgbench -M prepared binds them again as $n.
var pgbenchParams = []string{"xmin", "ymin", "xmax", "ymax", "extent", "buffer", "bufm", "maxf", "layer"}

var placeholder = regexp.MustCompile(`\$([1-9])\b`)

// PgbenchScript renders a pgbench custom script that runs the layer's own
// tile query (tiles.Layer.SQL) for a uniformly random tile of ts, in the
// transaction tiles.Store sends as one batch — BEGIN READ ONLY, jit off,
// the layer's statement_timeout, the query, COMMIT — here one pipeline.
// The layer name is pgbench's variable :layer (pgbench -D layer=NAME).
func PgbenchScript(l *tiles.Layer, ts []maptile.Tile) (string, error) {
	if len(ts) == 0 {
		return "", errors.New("pgbench script: no tiles")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- %d tiles of layer %s; run with -M prepared -D layer=%s\n", len(ts), l.Name, l.Name)
	fmt.Fprintf(&b, "\\set k random(0, %d)\n", len(ts)-1)
	envs := make([][4]float64, len(ts))
	for i, t := range ts {
		e := tiles.Envelope(t)
		envs[i] = [4]float64{e.Min[0], e.Min[1], e.Max[0], e.Max[1]}
	}
	for j, name := range pgbenchParams[:4] {
		fmt.Fprintf(&b, "\\set %s CASE", name)
		for i := range ts {
			fmt.Fprintf(&b, " WHEN :k = %d THEN %s", i, strconv.FormatFloat(envs[i][j], 'f', -1, 64))
		}
		b.WriteString(" END\n")
	}
	fmt.Fprintf(&b, "\\set extent %d\n\\set buffer %d\n\\set maxf %d\n", l.Extent, l.Buffer, l.MaxFeatures)
	fmt.Fprintf(&b, "\\set bufm (:xmax - :xmin) * %d.0 / %d.0\n", l.Buffer, l.Extent)
	var query []string
	for _, line := range strings.Split(l.SQL(), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") { // comments hold "$n" and colons
			query = append(query, line)
		}
	}
	q := placeholder.ReplaceAllStringFunc(strings.Join(query, "\n"), func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		return ":" + pgbenchParams[n-1]
	})
	fmt.Fprintf(&b, "\\startpipeline\nBEGIN READ ONLY;\nSELECT set_config('jit', 'off', true);\n")
	fmt.Fprintf(&b, "SELECT set_config('statement_timeout', '%d', true);\n", l.StatementTimeout.Milliseconds())
	fmt.Fprintf(&b, "%s;\nCOMMIT;\n\\endpipeline\n", strings.TrimRight(q, "\n; "))
	return b.String(), nil
}

// Pgbench runs a script: the database's own ceiling for it.
type Pgbench struct {
	Path        string        // default "pgbench" on PATH
	DatabaseURL string        // the read role, as the server connects
	Clients     int           // -c, default 16
	Threads     int           // -j, default 2
	Duration    time.Duration // -T, default 10 s
	// Transactions, when positive, is each client's count (-t) instead of
	// a Duration.
	Transactions int
	Dir          string // where the script is written; default a temp dir
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// Run writes script and runs `pgbench -n -M prepared -c C -j J -T T -f
// script -D layer=LAYER` (-t N instead of -T with Transactions), returning
// its transactions per second.
func (p Pgbench) Run(ctx context.Context, script, layer string) (float64, string, error) {
	if p.Path == "" {
		p.Path = "pgbench"
	}
	p.Clients, p.Threads = cmpOr(p.Clients, 16), cmpOr(p.Threads, 2)
	if p.Duration <= 0 {
		p.Duration = 10 * time.Second
	}
	dir := p.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "geotoll-pgbench-")
		if err != nil {
			return 0, "", err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	file := filepath.Join(dir, "tiles-"+layer+".pgbench")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return 0, "", err
	}
	run := []string{"-T", strconv.Itoa(int(p.Duration.Seconds()))}
	if p.Transactions > 0 {
		run = []string{"-t", strconv.Itoa(p.Transactions)}
	}
	args := append([]string{"-n", "-M", "prepared", "-c", strconv.Itoa(p.Clients), "-j", strconv.Itoa(p.Threads)}, run...)
	args = append(args, "-f", file, "-D", "layer="+layer, p.DatabaseURL)
	out, err := exec.CommandContext(ctx, p.Path, args...).CombinedOutput()
	if err != nil {
		return 0, string(out), fmt.Errorf("pgbench: %w: %s", err, lastLines(string(out), 5))
	}
	m := tpsLine.FindStringSubmatch(string(out))
	if m == nil {
		return 0, string(out), fmt.Errorf("pgbench: no tps in its output: %s", lastLines(string(out), 5))
	}
	tps, err := strconv.ParseFloat(m[1], 64)
	return tps, string(out), err
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
