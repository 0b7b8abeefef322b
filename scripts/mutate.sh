#!/usr/bin/env bash
# Mutation testing of the packages where a silent mistake costs money or
# security (see TESTING.md, "Mutation").
#
#   scripts/mutate.sh GREMLINS OUTDIR "ENTRY ..."
#
# GREMLINS is the go-gremlins/gremlins binary (make mutate builds it at the
# version tools/go.mod pins). ENTRY is a package directory ("throttle"),
# optionally followed by the only files of it to mutate
# (":toll.go,caller.go") and by a -run pattern of the tests to run on
# each mutant ("@TestParseTile|FuzzParseTile"; without it the package's
# whole test suite runs, the tests in the named files' own _test.go files
# first). Entries are separated by spaces, in one
# argument. For each entry, gremlins' log and JSON results land in
# OUTDIR/<dir with / as ->.{log,json} (-2, -3… after the name for a
# package's second and later entries); then the score table is printed and
# written to OUTDIR/scores.md.
#
# Settings (environment):
#   MUTATE_WORKERS              mutants tested at once (default 2)
#   MUTATE_TIMEOUT_COEFFICIENT  a mutant's test run may take this many times
#                               the package's coverage run (default 20: that
#                               run finds its packages compiled, a mutant
#                               recompiles its own, which on a busy 2-core
#                               machine takes 10× longer; only a mutant that
#                               hangs ever waits this long)
#   MUTATE_MIN_EFFICACY         fail when a package kills fewer than this
#                               percent of its covered mutants (default 85)
#   MUTATE_SKIP                 a -skip pattern of tests left out of every
#                               run (default: none; make mutate sets it)
# The test services must be up and exported (make mutate does both).
set -euo pipefail

gremlins=$(realpath "$1")
out=$(realpath -m "$2")
read -ra entries <<<"$3"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log

# -count=1: no cached test result, in the coverage run (whose time sets the
# mutants' timeout) or a mutant's. Each mutant compiles and links its own
# test binary, which is most of its time: -vet=off leaves out go vet
# (a check of the code, not a test: it is make lint's) and -ldflags=-w the
# binary's debug information. -exec: scripts/mutate-exec.sh runs the tests
# MUTATE_FIRST names first (below).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-count=1 -vet=off -ldflags=-w -exec=$root/scripts/mutate-exec.sh${MUTATE_SKIP:+ -skip=$MUTATE_SKIP}"
start=$SECONDS
reports=()
for entry in "${entries[@]}"; do
	run=""
	if [[ $entry == *@* ]]; then
		run=${entry#*@}
		entry=${entry%%@*}
	fi
	dir=${entry%%:*}
	keep=""
	[[ $entry == *:* ]] && keep=",${entry#*:},"
	excludes=()
	if [[ -n $keep ]]; then
		for f in "$root/$dir"/*.go; do
			base=${f##*/}
			[[ $base == *_test.go || $keep == *",$base,"* ]] && continue
			excludes+=(--exclude-files "^${base//./\\.}\$")
		done
	fi
	# An entry that names its files and no -run pattern runs the tests of
	# those files' own _test.go files first (scripts/mutate-exec.sh): most
	# mutants fail one of them and never wait for the integration tests.
	first=""
	if [[ -n $keep && -z $run ]]; then
		first=$(for f in ${keep//,/ }; do
			t="$root/$dir/${f%.go}_test.go"
			if [[ -f $t ]]; then
				sed -nE 's/^func ((Test|Fuzz|Example)[[:alnum:]_]*)\(.*/\1/p' "$t"
			fi
		done | paste -sd'|')
		first=${first:+^($first)\$}
	fi
	# A second entry of the same package writes its own files (name-2).
	name=${dir//\//-}
	n=1
	while [[ -e $out/$name.log ]]; do
		n=$((n + 1))
		name=${dir//\//-}-$n
	done
	echo "mutate: $dir${keep:+ (only ${keep:1:-1})}${run:+, tests $run}"
	(cd "$root/$dir" && GOFLAGS="$GOFLAGS${run:+ -run=$run}" MUTATE_FIRST=$first "$gremlins" unleash --workers "${MUTATE_WORKERS:-2}" \
		--timeout-coefficient "${MUTATE_TIMEOUT_COEFFICIENT:-20}" \
		--output "$out/$name.json" "${excludes[@]}") >"$out/$name.log" 2>&1 || {
		tail -20 "$out/$name.log" >&2
		exit 1
	}
	tail -4 "$out/$name.log"
	reports+=("$dir=$out/$name.json")
done
echo "mutate: $((SECONDS - start)) s in all"
cd "$root/tools"
go run ./mutationtable -min "${MUTATE_MIN_EFFICACY:-85}" -o "$out/scores.md" "${reports[@]}"
