#!/usr/bin/env bash
# Give the private PostgreSQL of scripts/services.sh a CPU of its own, as a
# database on its own host has, for benchmarks that compare the server with
# the database's ceiling.
#
#   scripts/pin.sh on          PostgreSQL (the postmaster and every backend;
#                              backends started later inherit it) on the
#                              last CPU this shell may use, Redis on the
#                              others
#   scripts/pin.sh off         every one of them on every CPU this shell
#                              may use again
#   scripts/pin.sh run CMD...  run CMD on the CPUs PostgreSQL does not get
#                              (with `on`: a load generator, pgbench or the
#                              server itself, beside the database's CPU)
#   scripts/pin.sh status      print each one's CPUs
#
# GEOTOLL_STATE_DIR is read as scripts/services.sh reads it. Needs at least
# 2 CPUs, taskset (util-linux), and the right to change the affinity of
# the services' processes (the user who started them, or root). The
# services are shared by every checkout that uses the state dir: `on`
# pins them for all of them until `off`.
set -euo pipefail

STATE=${GEOTOLL_STATE_DIR:-/tmp/geotoll-services}

die() {
	echo "pin.sh: $*" >&2
	exit 1
}

# The CPUs this shell may use (its affinity: a cpuset or offline CPUs are
# left out), one per line.
allowed_cpus() {
	local list r
	list=$(taskset -c -p $$ | sed 's/.*: //')
	for r in ${list//,/ }; do
		if [[ $r == *-* ]]; then
			seq "${r%-*}" "${r#*-}"
		else
			echo "$r"
		fi
	done
}

command -v taskset >/dev/null 2>&1 || die "taskset (util-linux) is not installed"
mapfile -t cpus < <(allowed_cpus)
((${#cpus[@]} >= 2)) || die "needs at least 2 CPUs, this shell may use ${#cpus[@]}"
last=${cpus[-1]}
rest=$(
	IFS=,
	echo "${cpus[*]:0:${#cpus[@]}-1}"
)
all=$(
	IFS=,
	echo "${cpus[*]}"
)

# pidof_service FILE COMM DIR: the pid in FILE, if that process is still
# COMM and runs in DIR (services.sh starts each in its own directory: the
# data directory, the state dir) — not another process that got the pid.
pidof_service() {
	local f=$1 comm=$2 dir=$3 pid
	[[ -r $f ]] || return 0
	pid=$(head -n1 "$f")
	if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm"* && /proc/$pid/cwd -ef $dir ]]; then
		echo "$pid"
	fi
	return 0
}

postmaster() {
	local pm
	pm=$(pidof_service "$STATE/pg/postmaster.pid" postgres "$STATE/pg")
	[[ -n $pm ]] || die "no PostgreSQL of scripts/services.sh runs under $STATE"
	echo "$pm"
}

# pin CPUS PID...: each process and all its threads. Only a process that
# has ended (a backend that quit) is passed over.
pin() {
	local to=$1 p err
	shift
	for p in "$@"; do
		if ! err=$(taskset -a -p -c "$to" "$p" 2>&1) && [[ -e /proc/$p ]]; then
			die "cannot move process $p to CPUs $to: $err"
		fi
	done
}

# place CPUS_PG CPUS_REDIS: the postmaster first, so that a backend it
# starts meanwhile inherits its CPUs, then the backends it has.
place() {
	local pm r
	pm=$(postmaster)
	pin "$1" "$pm"
	# shellcheck disable=SC2046 # one pid per word
	pin "$1" $(pgrep -P "$pm" || true)
	r=$(pidof_service "$STATE/redis.pid" redis-server "$STATE")
	[[ -z $r ]] || pin "$2" "$r"
}

status() {
	local pm r
	pm=$(postmaster)
	echo "postgresql: CPUs $(taskset -c -p "$pm" | sed 's/.*: //')"
	r=$(pidof_service "$STATE/redis.pid" redis-server "$STATE")
	[[ -z $r ]] || echo "redis:      CPUs $(taskset -c -p "$r" | sed 's/.*: //')"
}

case ${1:-status} in
on)
	place "$last" "$rest"
	status
	;;
off)
	place "$all" "$all"
	status
	;;
run)
	shift
	(($# > 0)) || die "run needs a command"
	exec taskset -c "$rest" "$@"
	;;
status)
	status
	;;
*)
	die "usage: scripts/pin.sh on|off|run CMD...|status"
	;;
esac
