package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

var placeholder = regexp.MustCompile(`\$([0-9]+)\b`)

// PgbenchScript renders a pgbench custom script that runs the layer's own
// tile query (tiles.Layer.Query, bound exactly as tiles.Store binds it) for
// a uniformly random tile of ts, in the transaction tiles.Store sends as
// one batch — BEGIN READ ONLY, jit off, the layer's statement_timeout, the
// query, COMMIT — here one pipeline. The query's parameters are pgbench
// variables :p1, :p2…, set per tile (a CASE over the tiles when they
// differ); the layer name is :layer (pgbench -D layer=NAME). Tiles whose
// zooms run different query texts (another overview, clustering or not)
// are grouped, and the script branches (\if) to its tile's group.
//
// pgbench reads every result as text, so each tile reaches it as hex —
// twice its bytes, encoded by the backend — where geotoll reads the tile
// in binary: the rate of this script is under the database's own ceiling
// for the query, most for large tiles on a machine whose system calls are
// dear. [PgbenchUnsentScript] brackets it from above.
func PgbenchScript(l *tiles.Layer, ts []maptile.Tile) (string, error) {
	return pgbenchScript(l, ts, false)
}

// PgbenchUnsentScript is [PgbenchScript] with each tile's length and
// level answered in place of the tile and its level (UnsentQuery): the
// database builds every tile as before and sends a few bytes of it, so
// its rate is over the database's ceiling for serving the tiles, which
// must send them — when pgbench's clients keep the database busy (with
// the database on a CPU of its own and pgbench on the other, geotoll's
// pool has outrun both scripts).
func PgbenchUnsentScript(l *tiles.Layer, ts []maptile.Tile) (string, error) {
	return pgbenchScript(l, ts, true)
}

func pgbenchScript(l *tiles.Layer, ts []maptile.Tile, unsent bool) (string, error) {
	if len(ts) == 0 {
		return "", errors.New("pgbench script: no tiles")
	}
	// Tiles grouped by query text, in order of first appearance; :k
	// numbers the tiles group after group.
	var texts []string
	var groups [][]int
	var args [][]any
	for _, t := range ts {
		sql, a := l.Query(t)
		g := slices.Index(texts, sql)
		if g < 0 {
			texts, groups = append(texts, sql), append(groups, nil)
			g = len(texts) - 1
		}
		groups[g] = append(groups[g], len(args))
		args = append(args, a)
	}
	order := slices.Concat(groups...)
	var b strings.Builder
	fmt.Fprintf(&b, "-- %d tiles of layer %s; run with -M prepared -D layer=%s\n", len(ts), l.Name, l.Name)
	fmt.Fprintf(&b, "\\set k random(0, %d)\n", len(ts)-1)
	if err := writeParams(&b, l, args, order); err != nil {
		return "", err
	}
	end := 0
	for g, text := range texts {
		end += len(groups[g])
		switch {
		case len(texts) == 1:
		case g == 0:
			fmt.Fprintf(&b, "\\if :k < %d\n", end)
		case g < len(texts)-1:
			fmt.Fprintf(&b, "\\elif :k < %d\n", end)
		default:
			b.WriteString("\\else\n")
		}
		var query []string
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") { // comments hold "$n" and colons
				query = append(query, line)
			}
		}
		q := placeholder.ReplaceAllStringFunc(strings.Join(query, "\n"), func(m string) string {
			n, _ := strconv.Atoi(m[1:])
			if n < 1 || n > len(args[0]) {
				return m // not a parameter the query binds (tested: none)
			}
			if _, isName := args[0][n-1].(string); isName {
				return ":layer"
			}
			return ":p" + m[1:]
		})
		fmt.Fprintf(&b, "\\startpipeline\nBEGIN READ ONLY;\n%s;\n", tiles.ReadSettingsSQL)
		fmt.Fprintf(&b, "SELECT set_config('statement_timeout', '%d', true);\n", l.StatementTimeout.Milliseconds())
		q = strings.TrimRight(q, "\n; ")
		if unsent {
			q = UnsentQuery(q)
		}
		fmt.Fprintf(&b, "%s;\nCOMMIT;\n\\endpipeline\n", q)
	}
	if len(texts) > 1 {
		b.WriteString("\\endif\n")
	}
	return b.String(), nil
}

// UnsentQuery wraps a tile query (tiles.Layer.Query, which answers the
// tile and its level) to answer the tile's length and the level: the
// database builds the tile and sends a few bytes.
func UnsentQuery(query string) string {
	return "SELECT length(t.mvt), t.level FROM (\n" + strings.TrimRight(query, "\n; ") + "\n) AS t(mvt, level)"
}

// writeParams sets :pN for every numeric parameter of the tiles' queries,
// :k numbering the tiles in order: one value when every tile binds the
// same, else a CASE over the tiles. The only text parameter is the layer
// name, pgbench's :layer.
func writeParams(b *strings.Builder, l *tiles.Layer, args [][]any, order []int) error {
	for j := range args[0] {
		vals := make([]string, len(order))
		for k, i := range order {
			if j >= len(args[i]) {
				return fmt.Errorf("pgbench script: tiles bind %d and %d parameters", len(args[0]), len(args[i]))
			}
			switch v := args[i][j].(type) {
			case string:
				if v != l.Name {
					return fmt.Errorf("pgbench script: text parameter $%d is %q, not the layer name", j+1, v)
				}
				vals[k] = ""
			case float64:
				vals[k] = strconv.FormatFloat(v, 'f', -1, 64)
			case int:
				vals[k] = strconv.Itoa(v)
			case int64:
				vals[k] = strconv.FormatInt(v, 10)
			default:
				return fmt.Errorf("pgbench script: parameter $%d is a %T", j+1, v)
			}
		}
		switch {
		case vals[0] == "": // the layer name
		case !slices.ContainsFunc(vals, func(v string) bool { return v != vals[0] }):
			fmt.Fprintf(b, "\\set p%d %s\n", j+1, vals[0])
		default:
			fmt.Fprintf(b, "\\set p%d CASE", j+1)
			for k, v := range vals {
				fmt.Fprintf(b, " WHEN :k = %d THEN %s", k, v)
			}
			b.WriteString(" END\n")
		}
	}
	return nil
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
	// Steady, when positive, makes Run's rate the steady one: over the
	// span in which every client had run its first Steady transactions
	// and none had finished (from pgbench -l's logs), not pgbench's own
	// tps, which counts a fresh connection's warm-up and the run's tail.
	Steady int
	Dir    string // where the script (and logs) are written; default a temp dir
}

// PgbenchTPS is the rate pgbench's own output reports (its tps without
// initial connection time) — with Pgbench.Steady, Run's rate is the
// steady one instead.
func PgbenchTPS(out string) (float64, error) {
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps in its output: %s", lastLines(out, 5))
	}
	return strconv.ParseFloat(m[1], 64)
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// Run writes script and runs `pgbench -n -M prepared -c C -j J -T T -f
// script -D layer=LAYER` (-t N instead of -T with Transactions), returning
// its transactions per second: pgbench's own, or with Steady, the steady
// rate from its per-transaction logs (-l, written beside the script).
func (p Pgbench) Run(ctx context.Context, script, layer string) (float64, string, error) {
	r, err := p.Exec(ctx, script, layer)
	return r.TPS, r.Output, err
}

// PgbenchRun is what a pgbench run reports.
type PgbenchRun struct {
	TPS          float64 // as Run answers it
	Output       string
	Transactions int           // processed, by its output
	CPU          time.Duration // pgbench's own, user and system
}

// Exec runs pgbench as Run does, and answers its transactions and CPU
// time as well.
func (p Pgbench) Exec(ctx context.Context, script, layer string) (PgbenchRun, error) {
	var r PgbenchRun
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
			return r, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	file := filepath.Join(dir, "tiles-"+layer+".pgbench")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil { //nolint:gosec // G306: a temporary pgbench script, not a secret
		return r, err
	}
	run := []string{"-T", strconv.Itoa(int(p.Duration.Seconds()))}
	if p.Transactions > 0 {
		run = []string{"-t", strconv.Itoa(p.Transactions)}
	}
	args := append([]string{"-n", "-M", "prepared", "-c", strconv.Itoa(p.Clients), "-j", strconv.Itoa(p.Threads)}, run...)
	var logDir string
	if p.Steady > 0 {
		d, err := os.MkdirTemp(dir, "log-")
		if err != nil {
			return r, err
		}
		logDir = d
		args = append(args, "-l", "--log-prefix", filepath.Join(logDir, "tx"))
	}
	args = append(args, "-f", file, "-D", "layer="+layer)
	cmd, err := p.command(ctx, args)
	if err != nil {
		return r, err
	}
	out, err := cmd.CombinedOutput()
	r.Output = string(out)
	if cmd.ProcessState != nil {
		r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return r, fmt.Errorf("pgbench: %w: %s", err, lastLines(r.Output, 5))
	}
	if r.Transactions, err = pgbenchTransactions(r.Output); err != nil {
		return r, err
	}
	if p.Steady > 0 {
		r.TPS, err = readSteadyRate(logDir, p.Clients, p.Steady)
		return r, err
	}
	r.TPS, err = PgbenchTPS(r.Output)
	return r, err
}

// command is pgbench (p.Path) with args and then the database to run
// against, DatabaseURL without its password: the password goes to the
// child's environment (PGPASSWORD), never onto its command line, which
// ps and /proc/PID/cmdline show every user of the host. Without a
// password in DatabaseURL the environment is this process's (a
// PGPASSWORD or ~/.pgpass of its own still serves).
func (p Pgbench) command(ctx context.Context, args []string) (*exec.Cmd, error) {
	conninfo, password, err := splitPassword(p.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if conninfo != "" {
		args = append(args, conninfo)
	}
	cmd := exec.CommandContext(ctx, p.Path, args...) //nolint:gosec // G204: p.Path is pgbench found by exec.LookPath; args are built here
	if password != "" {
		cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
	}
	return cmd, nil
}

var errSSLPassword = errors.New("pgbench: the database URL's sslpassword would be on pgbench's command line (libpq reads it from no environment variable)")

// splitPassword takes the password out of a libpq connection string — a
// postgres:// or postgresql:// URL (its user info, or a password
// parameter), keyword=value pairs, or a database's name — and answers the
// rest and the password. An sslpassword, which libpq takes from no environment
// variable, is refused rather than put on a command line.
func splitPassword(conn string) (conninfo, password string, err error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", "", errors.New("pgbench: the database URL does not parse") // the error would quote the password
		}
		q := u.Query()
		if q.Has("sslpassword") {
			return "", "", errSSLPassword
		}
		if pw, ok := u.User.Password(); ok {
			password = pw
			name := u.User.Username()
			u.User = nil
			if name != "" {
				u.User = url.User(name)
			}
		}
		if q.Has("password") {
			password = q.Get("password")
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String(), password, nil
	}
	if !strings.Contains(conn, "=") {
		return conn, "", nil // a database's name, as pgbench takes it too
	}
	pairs, err := parseConninfo(conn)
	if err != nil {
		return "", "", err
	}
	var b strings.Builder
	for _, kv := range pairs {
		switch kv[0] {
		case "password":
			password = kv[1]
			continue
		case "sslpassword":
			return "", "", errSSLPassword
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s='%s'", kv[0], strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(kv[1]))
	}
	return b.String(), password, nil
}

// parseConninfo reads libpq's keyword=value connection string: pairs
// apart by white space, white space around "=" allowed, a value in
// single quotes or not, a backslash escaping the next character.
func parseConninfo(s string) ([][2]string, error) {
	var pairs [][2]string
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	i := 0
	skip := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		skip()
		if i == len(s) {
			return pairs, nil
		}
		k := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[k:i]
		skip()
		if i == len(s) || s[i] != '=' || key == "" {
			// Not quoted: it may be a password.
			return nil, errors.New("pgbench: the database connection string is neither a postgres:// URL nor keyword=value pairs")
		}
		i++
		skip()
		var v strings.Builder
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		for ; i < len(s); i++ {
			c := s[i]
			if c == '\\' {
				if i+1 < len(s) {
					v.WriteByte(s[i+1])
				}
				i++ // a backslash at the end escapes nothing
				continue
			}
			if quoted && c == '\'' {
				break
			}
			if !quoted && isSpace(c) {
				break
			}
			v.WriteByte(c)
		}
		i = min(i, len(s))
		if quoted {
			if i == len(s) {
				return nil, fmt.Errorf("pgbench: an unterminated quoted value of %s in the database connection string", key)
			}
			i++ // the closing quote
		}
		pairs = append(pairs, [2]string{key, v.String()})
	}
}

// pgbenchTransactions is the count of transactions pgbench's output says
// it processed.
func pgbenchTransactions(out string) (int, error) {
	m := processedLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no transaction count in its output: %s", lastLines(out, 5))
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, fmt.Errorf("pgbench: transaction count %q: %w", m[1], err)
	}
	return n, nil
}

var processedLine = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)

// readSteadyRate is steadyRate over the logs pgbench wrote into dir (one
// per thread).
func readSteadyRate(dir string, clients, skip int) (float64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "tx.*"))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("pgbench: no transaction log in %s", dir)
	}
	var logs []io.Reader
	for _, f := range files {
		fh, err := os.Open(f) //nolint:gosec // G304: a log pgbench wrote into our temp dir
		if err != nil {
			return 0, err
		}
		defer fh.Close()
		logs = append(logs, fh)
	}
	return steadyRate(logs, clients, skip)
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
