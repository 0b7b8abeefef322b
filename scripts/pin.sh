#!/usr/bin/env bash
# Give the private PostgreSQL of scripts/services.sh CPUs of its own, as a
# database on its own host has, for benchmarks that compare the server with
# the database's ceiling.
#
#   scripts/pin.sh on          PostgreSQL (the postmaster and every backend;
#                              backends started later inherit it) on the
#                              last CPU, Redis on the others
#   scripts/pin.sh off         every one of them on every CPU again
#   scripts/pin.sh run CMD...  run CMD on the CPUs PostgreSQL does not have
#                              (with `on`: a load generator, pgbench or the
#                              server itself, beside the database's CPU)
#   scripts/pin.sh status      print each one's CPUs
#
# Settings: GEOTOLL_STATE_DIR and GEOTOLL_REDIS_PORT as for
# scripts/services.sh. Needs at least 2 CPUs, taskset (util-linux), and the
# right to change the affinity of the postgres user's processes (root).
set -euo pipefail

STATE=${GEOTOLL_STATE_DIR:-/tmp/geotoll-services}
REDIS_PORT=${GEOTOLL_REDIS_PORT:-56379}

die() {
	echo "pin.sh: $*" >&2
	exit 1
}

cpus=$(nproc --all)
((cpus >= 2)) || die "needs at least 2 CPUs, this machine has $cpus"
last=$((cpus - 1))
rest=0-$((last - 1))
all=0-$last

postmaster() {
	local f=$STATE/pg/postmaster.pid
	[[ -r $f ]] || die "no PostgreSQL of scripts/services.sh runs ($f is missing)"
	head -n1 "$f"
}

redis_pid() {
	[[ -r $STATE/redis.pid ]] && cat "$STATE/redis.pid" || true
}

# pin CPUS PID...: each process and all its threads.
pin() {
	local to=$1
	shift
	for p in "$@"; do
		taskset -a -p -c "$to" "$p" >/dev/null 2>&1 || true # a backend may have ended
	done
}

case ${1:-status} in
on)
	pm=$(postmaster)
	pin "$last" "$pm" $(pgrep -P "$pm" || true)
	r=$(redis_pid)
	[[ -z $r ]] || pin "$rest" "$r"
	;;
off)
	pm=$(postmaster)
	pin "$all" "$pm" $(pgrep -P "$pm" || true)
	r=$(redis_pid)
	[[ -z $r ]] || pin "$all" "$r"
	;;
run)
	shift
	(($# > 0)) || die "run needs a command"
	exec taskset -c "$rest" "$@"
	;;
status)
	echo "postgresql: CPUs $(taskset -c -p "$(postmaster)" | sed 's/.*: //')"
	r=$(redis_pid)
	[[ -z $r ]] || echo "redis:      CPUs $(taskset -c -p "$r" | sed 's/.*: //')"
	;;
*)
	die "usage: scripts/pin.sh on|off|run CMD...|status"
	;;
esac
