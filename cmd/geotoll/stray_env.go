package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// toolVars are GEOTOLL_ variables this repository's scripts and tests
// read, not geotoll's settings: scripts/services.sh's ports, state and
// URLs, the test suites' switches.
var toolVars = []string{
	"GEOTOLL_READ_DATABASE_URL", "GEOTOLL_STATE_DIR", "GEOTOLL_PG_PORT", "GEOTOLL_REDIS_PORT",
	"GEOTOLL_REDIS_CLUSTER_PORT", "GEOTOLL_NO_DOCKER", "GEOTOLL_WAIT_SECONDS", "GEOTOLL_REQUIRE_SERVICES",
	"GEOTOLL_CHAOS_BIN", "GEOTOLL_CHROMIUM", "GEOTOLL_ARTIFACTS", "GEOTOLL_PREVIEW_KEY", "GEOTOLL_PREVIEW_URL",
	"GEOTOLL_README_URL", "GEOTOLL_SERVICES_TURN",
}

// toolPrefixes start the tests' and benchmarks' own variables.
var toolPrefixes = []string{"GEOTOLL_TEST_", "GEOTOLL_BENCH_"}

// strayEnv returns the set GEOTOLL_ variables of environ that set
// nothing — no setting, secret file, alias, -config, nor a variable of
// the scripts or tests (a tier's, GEOTOLL_THROTTLE_TIERS_…, is refused
// by fileTiers) — each with the setting's variable it is likely a
// misspelling of, or "": a misspelt variable was ignored without a word.
func (o *overrides) strayEnv(environ []string) [][2]string {
	known := map[string]bool{envPrefix + "_CONFIG": true}
	var names []string
	for _, s := range o.settings {
		known[s.Env], known[s.Env+"_FILE"] = true, s.Secret
		names = append(names, s.Env)
	}
	for _, a := range envAliases {
		known[a.env] = true
	}
	for _, v := range toolVars {
		known[v] = true
	}
	var stray [][2]string
	for _, kv := range environ {
		env, v, _ := strings.Cut(kv, "=")
		if v == "" || !strings.HasPrefix(env, envPrefix+"_") || known[env] || strings.HasPrefix(env, tierEnvPrefix) ||
			slices.ContainsFunc(toolPrefixes, func(p string) bool { return strings.HasPrefix(env, p) }) {
			continue
		}
		stray = append(stray, [2]string{env, closest(env, names)})
	}
	return stray
}

// strayNote says what a stray variable (strayEnv) did: nothing.
func strayNote(s [2]string) string {
	if s[1] != "" {
		return fmt.Sprintf("the environment variable %s sets nothing, and is ignored: did you mean %s?", s[0], s[1])
	}
	return fmt.Sprintf("the environment variable %s sets nothing, and is ignored (geotoll config doc lists the settings' variables)", s[0])
}

// closest returns the name of names nearest to s, within two edits, or "".
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(s, n, bestD); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, or limit when it is
// at least that.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

// environ is the process's environment (a variable, for tests).
var environ = os.Environ
