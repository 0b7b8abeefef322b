package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/toll"
)

// runAsMain makes the test binary act as the geotoll binary (main) when
// the README sessions run `bin/geotoll`: the sessions then test this source
// tree, not whatever bin/geotoll was built last.
const runAsMain = "GEOTOLL_TEST_RUN_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsMain) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// readmeStep is one command of a README console session and the output the
// README shows for it.
type readmeStep struct {
	line    int // of the command in README.md
	command string
	want    []string
}

// readmeSessions returns the ```console blocks of the README, each as its
// steps. A step is a line starting with "$ " (and the lines it continues
// onto with a trailing backslash), followed by its output.
func readmeSessions(t *testing.T, path string) [][]readmeStep {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		sessions [][]readmeStep
		steps    []readmeStep
		in, cont bool
	)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in:
			in = line == "```console"
		case line == "```":
			sessions, steps, in = append(sessions, steps), nil, false
		case cont:
			steps[len(steps)-1].command += "\n" + line
			cont = strings.HasSuffix(line, `\`)
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, readmeStep{line: n, command: strings.TrimPrefix(line, "$ ")})
			cont = strings.HasSuffix(line, `\`)
		case len(steps) == 0:
			t.Fatalf("README.md:%d: a console session starts with output, not a command", n)
		default:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	if in {
		t.Fatal("README.md: a console block is not closed")
	}
	return sessions
}

// stepMark separates the output of one step from the next.
const stepMark = "\x1egeotoll-step\x1e"

// runSession runs one session's commands in one bash, in dir with env, the
// way a shell would run them pasted (a failing command does not stop the
// rest), and returns each step's output, stdout and stderr as the terminal
// would interleave them.
func runSession(t *testing.T, dir string, env []string, base string, steps []readmeStep) [][]string {
	t.Helper()
	var script strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&script, "printf '\\n%s\\n'\n%s\n", stepMark, strings.ReplaceAll(s.command, "http://localhost:8080", base))
	}
	path := filepath.Join(t.TempDir(), "session.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", path)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out // one pipe: the order a terminal shows
	// The exit status is the last command's, which the comparison judges.
	if err := cmd.Run(); ctx.Err() != nil {
		t.Fatalf("README.md:%d: the session did not end within 2 minutes (%v):\n%s", steps[0].line, err, out.String())
	}
	text := strings.ReplaceAll(out.String(), "\r\n", "\n")
	text = strings.ReplaceAll(text, strings.TrimPrefix(base, "http://"), "localhost:8080")
	parts := strings.Split(text, "\n"+stepMark+"\n")
	if len(parts) != len(steps)+1 {
		t.Fatalf("README.md:%d: %d step outputs for %d steps:\n%s", steps[0].line, len(parts)-1, len(steps), text)
	}
	outs := make([][]string, len(steps))
	for i, p := range parts[1:] {
		var lines []string
		for l := range strings.SplitSeq(p, "\n") {
			if !strings.HasPrefix(l, "Date: ") { // the README leaves Date lines out
				lines = append(lines, l)
			}
		}
		outs[i] = trimLines(lines)
	}
	return outs
}

// trimLines drops trailing white space of each line and blank lines at the
// end.
func trimLines(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(l, " \t")
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// lineMatches reports whether got is the README's line want, in which "…"
// stands for any text of one or more characters (what differs from run to
// run: ids, request ids, tokens refilled meanwhile). Prices and what
// follows from them are left out of the comparison on both sides
// (unpriced): the statuses and the other headers must match.
func lineMatches(want, got string) bool {
	want, got = unpriced(want), unpriced(got)
	if !strings.Contains(want, "…") {
		return want == got
	}
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".+") + "$").MatchString(got)
}

// priced are the parts of a session's output that follow from a request's
// price — the price itself (estimated and settled), the tokens left, when
// they refill and when to retry, the length of a body that holds them —
// each with what replaces it before two lines are compared. Prices follow
// the database's cost, which changes with the data and the machine;
// statuses, the policies and every other header must not.
var priced = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)^(X-Request-Cost|X-Request-Cost-Estimate|Ratelimit|X-Ratelimit-Remaining|X-Ratelimit-Reset|Retry-After|Content-Length): .*$`), "$1: #"},
	{regexp.MustCompile(`"(cost|remaining|retry_after|reset_after)":([0-9.]+|…)`), `"$1":#`},
	{regexp.MustCompile(`costs ([0-9.]+|…) tokens; ([0-9.]+|…) remain\. Retry in ([0-9.]+|…) s`), "costs # tokens; # remain. Retry in # s"},
	// A refusal a tarpit held until the bucket refilled to the price says so.
	{regexp.MustCompile(`costs ([0-9.]+|…) tokens, more than the bucket held when it was refused; ([0-9.]+|…) remain now\. Retry in ([0-9.]+|…) s`), "costs # tokens; # remain. Retry in # s"},
	{regexp.MustCompile(`\b(cost|estimate|retry-after)=([0-9.]+|…)`), "$1=#"},
}

// unpriced is line with its priced parts replaced.
func unpriced(line string) string {
	for _, p := range priced {
		line = p.re.ReplaceAllString(line, p.with)
	}
	return line
}

// readmeWorkdir is a directory laid out as a checkout after `make run`:
// bin/geotoll (this test binary acting as geotoll) and scripts/.
func readmeWorkdir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := filepath.Abs(filepath.Join("..", "..", "scripts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\n" + runAsMain + "=1 exec " + strconv.Quote(exe) + ` "$@"` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "bin", "geotoll"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(scripts, filepath.Join(dir, "scripts")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Every console session of the README runs as pasted — twice in a row, as
// a newcomer would — against a server configured as `make run` serves the
// demo, and prints what the README shows: every status, every header but
// Date, every body, with "…" where a value differs from run to run — all
// but the prices and what follows from them (unpriced).
//
// With GEOTOLL_README_URL set (e.g. http://localhost:8080) the sessions
// run against that server instead — a `make run` in another shell, with
// the services' environment in this one — and make their keys in the
// database GEOTOLL_ADMIN_DATABASE_URL names.
func TestReadmeSessions(t *testing.T) {
	t.Parallel()
	needSessionTools(t)
	sessions := readmeSessions(t, filepath.Join("..", "..", "README.md"))
	if len(sessions) < 3 {
		t.Fatalf("README.md has %d console sessions, want the tile, geofence and fence admin ones", len(sessions))
	}
	base, env := os.Getenv("GEOTOLL_README_URL"), os.Environ()
	if base == "" {
		base = readmeServer(t)
		env = append(env, "GEOTOLL_ADMIN_DATABASE_URL="+testenv.DatabaseURL(t))
	}
	dir := readmeWorkdir(t)

	for run := 1; run <= 2; run++ {
		for _, steps := range sessions {
			outs := runSession(t, dir, env, base, steps)
			for i, s := range steps {
				if diff := diffLines(trimLines(s.want), outs[i]); diff != "" {
					t.Errorf("run %d, README.md:%d: $ %s\n%s", run, s.line, s.command, diff)
				}
			}
		}
	}
}

// needSessionTools fails (skips, where services are not required) without
// what the README's sessions run in: bash and curl.
func needSessionTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if testenv.Required() {
				t.Fatalf("%s is not installed; the README sessions need it", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
}

// The README's key-guessing step shows a 429 "however full the bucket
// was", as TestReadmeSessions checks from a full bucket (its first run)
// and from whatever its second run starts from. This runs the step from
// fills that matter — full, and each count of whole tokens with half a
// token over or with a fraction that becomes whole between the 10th and
// the 11th guess — against the toll's failed-auth charge under the
// default limit, on a clock that moves 10 ms a request (the 11 guesses
// take 110 ms, well within the 5 s a token takes): the first answer of the
// step's output and its body are the README's, and from a full bucket the
// step sends 11 guesses.
func TestReadmeGuessesRefusedFromAnyFill(t *testing.T) {
	t.Parallel()
	needSessionTools(t)
	var step readmeStep
	for _, steps := range readmeSessions(t, filepath.Join("..", "..", "README.md")) {
		for _, s := range steps {
			if strings.Contains(s.command, "gt_guess") {
				step = s
			}
		}
	}
	step.want = trimLines(step.want)
	if len(step.want) < 2 || !strings.HasPrefix(step.want[0], "HTTP/1.1 429 ") {
		t.Fatalf("README.md: no key-guessing step that shows a 429 (%q)", step.want)
	}
	limit := DefaultConfig().Throttle.FailedAuth.limit()
	const tick = 10 * time.Millisecond
	perGuess := limit.Rate * tick.Seconds()
	fills := []float64{limit.Capacity}
	for n := 0; float64(n+1) < limit.Capacity; n++ {
		fills = append(fills, float64(n)+0.5, float64(n)+1-10.5*perGuess)
	}
	for _, fill := range fills {
		var (
			mu      sync.Mutex
			now     = time.Unix(1_700_000_000, 0)
			advance time.Duration
			guesses int
		)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		tl := &toll.Toll{Store: throttle.NewMemoryStore(throttle.MemoryOptions{Now: clock}), Prefix: "readme", FailedAuth: limit}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			now, guesses = now.Add(advance), guesses+1
			mu.Unlock()
			tl.ServeBudget(w, r) // an unknown key: the failed-auth charge every route makes
		}))
		// Empty the bucket at one instant, then let it refill to fill.
		for i := 0; i < int(limit.Capacity); i++ {
			res, err := srv.Client().Do(guessRequest(t, srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("guess %d into a full bucket: %d", i+1, res.StatusCode)
			}
		}
		mu.Lock()
		now, advance, guesses = now.Add(time.Duration(fill/limit.Rate*float64(time.Second))), tick, 0
		mu.Unlock()
		out := runSession(t, t.TempDir(), os.Environ(), srv.URL, []readmeStep{step})[0]
		srv.Close()
		if len(out) < 2 || !lineMatches(step.want[0], out[0]) || !lineMatches(step.want[len(step.want)-1], out[len(out)-1]) {
			t.Errorf("from %.3f tokens, README.md:%d shows %q … %q; got:\n%s", fill, step.line,
				step.want[0], step.want[len(step.want)-1], strings.Join(out, "\n"))
		}
		if fill == limit.Capacity && guesses != 11 {
			t.Errorf("from a full bucket the step sent %d guesses, want 11 (the 11th refused)", guesses)
		}
	}
}

// guessRequest is a request with an unknown key.
func guessRequest(t *testing.T, base string) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/tiles/places/14/8802/5373.mvt", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-API-Key", "gt_setup")
	return r
}

// readmeServer starts a server set up as `make run` sets it up (fence
// writes included) on the test database, and returns its URL. The keys
// the sessions make there (and revoke) are deleted when the test ends.
func readmeServer(t *testing.T) string {
	t.Helper()
	owner := testenv.Pool(t)
	var before int64
	if err := owner.QueryRow(t.Context(), "SELECT coalesce(max(id), 0) FROM geotoll.api_keys").Scan(&before); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = owner.Exec(context.Background(), "DELETE FROM geotoll.api_keys WHERE id > $1 AND revoked_at IS NOT NULL", before)
	})
	m := startMain(t, func(c *Config) { c.Geofence.WriterDatabaseURL = fenceWriterURL(t) })
	return "http://" + m.Addr()
}

// diffLines describes how got differs from the README's want ("" when it
// matches).
func diffLines(want, got []string) string {
	var b strings.Builder
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if i >= len(want) || i >= len(got) || !lineMatches(w, g) {
			fmt.Fprintf(&b, "  line %d:\n    README: %q\n    got:    %q\n", i+1, w, g)
		}
	}
	return b.String()
}

func TestLineMatches(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{"X-Request-Id: …", "X-Request-Id: 8aa0d6b98cc5e263", true},
		{"X-Request-Id: …", "X-Request-Id: ", false},
		{"a.b", "axb", false},
		{"200", "200", true},
		{"200", "429", false},
		{`{"id":…,"name":"yard"}`, `{"id":301,"name":"yard"}`, true},
		// Prices, and what follows from them, are not compared…
		{"X-Request-Cost: 60", "X-Request-Cost: 17", true},
		{`Ratelimit: "free";r=40;t=3`, `Ratelimit: "free";r=83;t=1`, true},
		{"X-Ratelimit-Remaining: …", "X-Ratelimit-Remaining: 0", true},
		{"Retry-After: 1", "Retry-After: 3", true},
		{"200 cost=60", "200 cost=7", true},
		{"X-Request-Cost-Estimate: 0.94", "X-Request-Cost-Estimate: 1.2", true},
		{"200 estimate=2.133 cost=1.702", "200 estimate=2.2 cost=3.5", true},
		{`{"cost":60,"detail":"this request costs 60 tokens; … remain. Retry in 1 s.","remaining":…,"status":429}`,
			`{"cost":7.5,"detail":"this request costs 7.5 tokens; 3.25 remain. Retry in 2 s.","remaining":3.25,"status":429}`, true},
		// …the statuses, the other headers and the rest of a body are.
		{"200 cost=60", "429 cost=60", false},
		{"HTTP/1.1 200 OK", "HTTP/1.1 429 Too Many Requests", false},
		{`Ratelimit-Policy: "free";q=100;w=5`, `Ratelimit-Policy: "free";q=50;w=5`, false},
		{"X-Ratelimit-Limit: 100", "X-Ratelimit-Limit: 50", false},
		{"X-Request-Cost: 60", "X-Request-Id: 60", false},
		{"X-Request-Cost: 0.94", "X-Request-Cost-Estimate: 0.94", false},
		{"200 estimate=2.133 cost=1.702", "429 estimate=2.133 cost=1.702", false},
		{"200 HIT cost=0.01", "200 MISS cost=0.01", false},
		{`{"cost":60,"dry_run":true,"would_allow":true}`, `{"cost":7,"dry_run":true,"would_allow":false}`, false},
	} {
		if got := lineMatches(tc.want, tc.got); got != tc.ok {
			t.Errorf("lineMatches(%q, %q) = %v", tc.want, tc.got, got)
		}
	}
}
