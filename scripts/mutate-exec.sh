#!/usr/bin/env bash
# The `go test -exec` program of scripts/mutate.sh: runs a mutant's test
# binary in two steps, so that a mutant meets the tests written beside the
# code it changes before the package's slower integration tests.
#
#   MUTATE_FIRST='^(TestA|TestB)$' go test -exec scripts/mutate-exec.sh …
#
# Step one runs only the tests MUTATE_FIRST matches; when one fails, the
# binary's exit status is the run's. Otherwise step two runs every other
# test (the -test.skip of the call plus MUTATE_FIRST). Both steps together
# run exactly the tests one call would, so a mutant is killed when and
# only when a test of the whole run fails; only the time to the first
# failure shrinks. The binary runs once, unchanged, without MUTATE_FIRST,
# with a -test.run of its own, or when it writes a coverage profile (which
# a second step would overwrite).
set -uo pipefail

bin=$1
shift
[[ -n ${MUTATE_FIRST:-} ]] || exec "$bin" "$@"
skip=""
args=()
for arg in "$@"; do
	case $arg in
	-test.run=* | -test.coverprofile=* | -test.gocoverdir=*) exec "$bin" "$@" ;;
	-test.skip=*) skip=${arg#-test.skip=} ;;
	*) args+=("$arg") ;;
	esac
done
"$bin" -test.run="$MUTATE_FIRST" ${skip:+"-test.skip=$skip"} "${args[@]}" || exit
exec "$bin" "-test.skip=$MUTATE_FIRST${skip:+|$skip}" "${args[@]}"
