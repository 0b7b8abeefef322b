#!/usr/bin/env bash
# Development and test services for geotoll: PostgreSQL 15 + PostGIS, and Redis.
#
#   scripts/services.sh [up]   start them (idempotent: reuses what already runs)
#   scripts/services.sh down   stop what this checkout started (--force: whoever did)
#   scripts/services.sh status print what runs
#   scripts/services.sh env    print `export` lines for the Makefile / your shell
#   scripts/services.sh cluster-up    start a 3-master Redis Cluster on loopback
#                              (ports 57001-57003, no persistence; idempotent)
#   scripts/services.sh cluster-down  stop it, if this checkout started it
#                              (--force: whoever did), and remove its state
#
# Several checkouts may share one state dir: `up` reuses what another one
# started, and `down` leaves it running. Each service started here records
# the checkout that started it (an owner file in the state dir); `down`
# stops it only from that checkout — or when that checkout no longer
# exists, or with --force.
#
# `up` picks, in order:
#   * DATABASE_URL set  -> no PostgreSQL is started (that server is used);
#     REDIS_URL set     -> no Redis is started.
#   * `docker info` answers and GEOTOLL_NO_DOCKER is unset -> docker compose
#     with docker-compose.yml.
#   * otherwise Debian packages (installed when missing) and a PRIVATE
#     PostgreSQL cluster and Redis under the state dir, on loopback ports. The
#     system cluster on 5432 is never touched.
#
# Settings (environment):
#   GEOTOLL_STATE_DIR   state dir (default /tmp/geotoll-services); must be
#                       traversable by the postgres user when run as root
#   GEOTOLL_PG_PORT     PostgreSQL port (default 55432), 127.0.0.1 only
#   GEOTOLL_REDIS_PORT  Redis port (default 56379), 127.0.0.1 only
#   GEOTOLL_REDIS_CLUSTER_PORT  first port of the Redis Cluster (default
#                       57001; the masters use it and the next two, their
#                       cluster bus the ports 10000 below)
#   GEOTOLL_NO_DOCKER   set to anything to never use docker
#   GEOTOLL_WAIT_SECONDS how long to wait for a service to answer (default 30)
#
# Everything here is for development and tests only: trust authentication,
# fsync off, no persistence in Redis.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd -P)

STATE=${GEOTOLL_STATE_DIR:-/tmp/geotoll-services}
PG_PORT=${GEOTOLL_PG_PORT:-55432}
REDIS_PORT=${GEOTOLL_REDIS_PORT:-56379}
CLUSTER_PORT=${GEOTOLL_REDIS_CLUSTER_PORT:-57001}
CLUSTER_DIR=$STATE/cluster
WAIT_SECONDS=${GEOTOLL_WAIT_SECONDS:-30}

PG_VERSION=15
PG_BIN=/usr/lib/postgresql/$PG_VERSION/bin
POSTGIS_CONTROL=/usr/share/postgresql/$PG_VERSION/extension/postgis.control
PG_DATA=$STATE/pg
PG_SOCK=$STATE/sock
PG_LOG=$STATE/pg.log
REDIS_PIDFILE=$STATE/redis.pid
REDIS_LOG=$STATE/redis.log
MODE_FILE=$STATE/mode
PG_OWNER=$STATE/pg.owner
REDIS_OWNER=$STATE/redis.owner
CLUSTER_OWNER=$STATE/cluster.owner
FORCE=
COMPOSE_FILE=$REPO_ROOT/docker-compose.yml
INIT_SQL=$SCRIPT_DIR/docker-init.sql

log() { printf 'services: %s\n' "$*" >&2; }
die() {
	printf 'services: error: %s\n' "$*" >&2
	exit 1
}

is_root() { [[ $(id -u) -eq 0 ]]; }

# The OS user that owns and runs the private cluster: PostgreSQL refuses to
# run as root, so root hands it to `postgres`.
db_user() {
	if is_root; then echo postgres; else id -un; fi
}

# Run a command as the cluster's OS user, from a directory it can enter.
as_db_user() {
	if is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# port_in_use PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
	# shellcheck disable=SC2016 # $0 is expanded by the inner bash
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

check_port() {
	local name=$1 value=$2
	if ! [[ $value =~ ^[0-9]+$ ]] || ((value < 1 || value > 65535)); then
		die "$name=$value is not a TCP port"
	fi
}

tail_log() {
	local file=$1
	if [[ -r $file ]]; then
		log "last lines of $file:"
		tail -n 30 "$file" >&2 || true
	else
		log "($file does not exist)"
	fi
}

# wait_for DESCRIPTION LOGFILE COMMAND...: retry COMMAND for WAIT_SECONDS.
wait_for() {
	local what=$1 logfile=$2
	shift 2
	local deadline=$((SECONDS + WAIT_SECONDS))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			tail_log "$logfile"
			die "$what did not answer within ${WAIT_SECONDS}s"
		fi
		sleep 0.5
	done
}

# ---------------------------------------------------------------- packages --

need_pg() { [[ -z ${DATABASE_URL:-} ]]; }
need_redis() { [[ -z ${REDIS_URL:-} ]]; }

# apt_install comes from scripts/apt.sh, shared with the browser test's installer.
APT_HINT="or set DATABASE_URL / REDIS_URL to servers you have"
# shellcheck source=scripts/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

ensure_packages() {
	local -a pkgs=()
	if need_pg; then
		[[ -x $PG_BIN/pg_ctl ]] || pkgs+=("postgresql-$PG_VERSION")
		[[ -f $POSTGIS_CONTROL ]] || pkgs+=("postgresql-$PG_VERSION-postgis-3")
	fi
	if need_redis; then
		command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
		command -v redis-cli >/dev/null 2>&1 || pkgs+=(redis-tools)
	fi
	if ((${#pkgs[@]} > 0)); then
		apt_install "${pkgs[@]}"
	fi
	if need_pg; then
		[[ -x $PG_BIN/pg_ctl ]] || die "$PG_BIN/pg_ctl is still missing after installing postgresql-$PG_VERSION"
		[[ -f $POSTGIS_CONTROL ]] || die "$POSTGIS_CONTROL is still missing after installing postgresql-$PG_VERSION-postgis-3"
		if is_root; then
			id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' user to run PostgreSQL as"
			command -v runuser >/dev/null 2>&1 || die "runuser (util-linux) is needed to run PostgreSQL as 'postgres'"
		fi
	fi
}

# ---------------------------------------------------------------- state dir --

ensure_state_dir() {
	mkdir -p "$STATE"
	if [[ -O $STATE ]]; then chmod 0755 "$STATE"; fi
	if need_pg && is_root; then
		# The postgres user must reach the data dir, socket dir and log through
		# every parent of $STATE (a repo under /root does not qualify).
		if ! as_db_user test -x "$STATE"; then
			die "the postgres user cannot enter $STATE (a parent directory is not traversable); set GEOTOLL_STATE_DIR to a path such as /tmp/geotoll-services"
		fi
	fi
}

# take_turn serialises the commands that start or stop services: two at
# once (make test beside make run, two checkouts sharing the state dir)
# would both find Redis stopped and both start it, or race on initdb and
# the pid files. It runs the command again under flock, which holds a
# lock file beside the state dir (which may not exist yet) until the
# command exits; -o keeps the lock's descriptor from the command, so the
# servers it starts do not hold the lock after it.
take_turn() {
	[[ -z ${GEOTOLL_SERVICES_TURN:-} ]] || return 0
	if ! command -v flock >/dev/null 2>&1; then
		log "flock not found (util-linux): not waiting for other services.sh commands"
		return 0
	fi
	local lock=${STATE%/}.lock
	mkdir -p "$(dirname "$lock")" 2>/dev/null || true
	if ! { : >>"$lock"; } 2>/dev/null; then
		log "cannot write $lock: not waiting for other services.sh commands"
		return 0
	fi
	GEOTOLL_SERVICES_TURN=1 exec flock -o -w 600 -E 75 "$lock" bash "${BASH_SOURCE[0]}" "$@"
}

record_mode() { echo "$1" >"$MODE_FILE"; }

# claim OWNERFILE: this checkout started the service.
claim() { echo "$REPO_ROOT" >"$1"; }

# ours OWNERFILE WHAT: whether `down` may stop WHAT, which runs: this
# checkout started it, or the one that did no longer exists, or --force.
ours() {
	local file=$1 what=$2 owner
	[[ -z $FORCE ]] || return 0
	if [[ ! -f $file ]]; then
		log "$what: no record of who started it; left running ('$0 down --force' stops it)"
		return 1
	fi
	owner=$(cat "$file")
	[[ $owner != "$REPO_ROOT" ]] || return 0
	if [[ ! -d $owner ]]; then
		log "$what was started by $owner, which no longer exists: stopping it"
		return 0
	fi
	log "$what was started by the checkout $owner: left running (stop it from there, or with '$0 down --force')"
	return 1
}
recorded_mode() {
	if [[ -f $MODE_FILE ]]; then cat "$MODE_FILE"; else echo none; fi
}

# ----------------------------------------------------------------- docker ---

docker_usable() {
	[[ -z ${GEOTOLL_NO_DOCKER:-} ]] || return 1
	command -v docker >/dev/null 2>&1 || return 1
	docker info >/dev/null 2>&1 || return 1
	if ! docker compose version >/dev/null 2>&1; then
		log "a Docker engine answers but the 'docker compose' plugin is missing; using local packages"
		return 1
	fi
}

compose() {
	GEOTOLL_PG_PORT=$PG_PORT GEOTOLL_REDIS_PORT=$REDIS_PORT \
		docker compose -f "$COMPOSE_FILE" --project-directory "$REPO_ROOT" "$@"
}

docker_up() {
	local -a svcs=()
	need_pg && svcs+=(postgis)
	need_redis && svcs+=(redis)
	record_mode docker
	log "starting ${svcs[*]} with docker compose ($COMPOSE_FILE)"
	compose up -d --wait "${svcs[@]}"
	log "docker services are up"
}

# ------------------------------------------------------------- postgresql ---

pg_running() {
	[[ -f $PG_DATA/PG_VERSION ]] && as_db_user "$PG_BIN/pg_ctl" status -D "$PG_DATA" >/dev/null 2>&1
}

pg_ready() {
	"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -t 2
}

pg_locale() {
	if locale -a 2>/dev/null | grep -qiE '^c\.utf-?8$'; then echo C.UTF-8; else echo C; fi
}

pg_init() {
	local owner
	owner=$(db_user)
	mkdir -p "$PG_SOCK"
	chown "$owner:" "$PG_SOCK"
	chmod 0700 "$PG_SOCK"
	touch "$PG_LOG"
	chown "$owner:" "$PG_LOG"

	if [[ ! -f $PG_DATA/PG_VERSION ]]; then
		rm -rf "$PG_DATA"
		mkdir -p "$PG_DATA"
		chown "$owner:" "$PG_DATA"
		chmod 0700 "$PG_DATA"
		local loc
		loc=$(pg_locale)
		log "initdb $PG_DATA (owner $owner, locale $loc)"
		as_db_user "$PG_BIN/initdb" -D "$PG_DATA" --auth=trust -U postgres \
			-E UTF8 --locale="$loc" >"$STATE/initdb.log" 2>&1 || {
			tail_log "$STATE/initdb.log"
			die "initdb failed"
		}
	fi
	local installed
	installed=$(cat "$PG_DATA/PG_VERSION")
	[[ $installed == "$PG_VERSION" ]] ||
		die "$PG_DATA holds a PostgreSQL $installed cluster, not $PG_VERSION: run '$0 down' and remove $STATE"

	# Rewritten on every start so port / socket changes take effect.
	as_db_user tee "$PG_DATA/geotoll.conf" >/dev/null <<EOF
# Written by scripts/services.sh: a throwaway dev/test cluster. fsync and
# friends are off for speed; never use these settings for data you keep.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCK'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
EOF
	if ! grep -q "^include_if_exists = 'geotoll.conf'" "$PG_DATA/postgresql.conf"; then
		printf "\ninclude_if_exists = 'geotoll.conf'\n" | as_db_user tee -a "$PG_DATA/postgresql.conf" >/dev/null
	fi
	# DEV ONLY: trust, no passwords, and only local sockets and loopback.
	as_db_user tee "$PG_DATA/pg_hba.conf" >/dev/null <<'EOF'
# Written by scripts/services.sh. DEVELOPMENT/TEST ONLY: trust authentication
# (no passwords) for the Unix socket and 127.0.0.1. Never expose this cluster.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 trust
host    all       all   127.0.0.1/32  trust
EOF
}

pg_bootstrap() {
	log "creating role geotoll, databases geotoll and geotoll_test, extensions postgis and pg_stat_statements (idempotent)"
	PGOPTIONS='-c client_min_messages=warning' \
		"$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
		-v ON_ERROR_STOP=1 -f "$INIT_SQL" >/dev/null ||
		die "bootstrapping the databases failed (see the psql error above)"
}

pg_up() {
	if pg_running; then
		if pg_ready; then
			log "PostgreSQL already runs on 127.0.0.1:$PG_PORT (reused; data $PG_DATA)"
			pg_bootstrap
			return 0
		fi
		die "our PostgreSQL in $PG_DATA runs but does not answer on 127.0.0.1:$PG_PORT (was it started with another GEOTOLL_PG_PORT?); run '$0 down' first"
	fi
	if port_in_use "$PG_PORT"; then
		die "127.0.0.1:$PG_PORT is taken by something that is not this script's PostgreSQL; stop it or set GEOTOLL_PG_PORT"
	fi
	pg_init
	log "starting PostgreSQL $PG_VERSION on 127.0.0.1:$PG_PORT (log $PG_LOG)"
	if ! as_db_user "$PG_BIN/pg_ctl" start -w -t "$WAIT_SECONDS" -D "$PG_DATA" -l "$PG_LOG" >/dev/null; then
		tail_log "$PG_LOG"
		die "PostgreSQL did not start"
	fi
	claim "$PG_OWNER"
	wait_for "PostgreSQL on 127.0.0.1:$PG_PORT" "$PG_LOG" pg_ready
	pg_bootstrap
	log "PostgreSQL is up"
}

# pg_down stops PostgreSQL if it runs and is ours to stop; it fails when it
# leaves it running.
pg_down() {
	if ! pg_running; then
		log "PostgreSQL ($PG_DATA) is not running"
		rm -f "$PG_OWNER"
		return 0
	fi
	ours "$PG_OWNER" "PostgreSQL on 127.0.0.1:$PG_PORT" || return 1
	log "stopping PostgreSQL ($PG_DATA)"
	as_db_user "$PG_BIN/pg_ctl" stop -w -m fast -D "$PG_DATA" >/dev/null
	rm -f "$PG_OWNER"
}

# ------------------------------------------------------------------ redis ---

# Prints the pid of the Redis this script started, if it still runs.
redis_pid() {
	[[ -f $REDIS_PIDFILE ]] || return 1
	local pid
	pid=$(tr -dc '0-9' <"$REDIS_PIDFILE")
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
	# Guard against a recycled pid.
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] || return 1
	echo "$pid"
}

redis_ready() {
	[[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

redis_up() {
	if redis_pid >/dev/null; then
		if redis_ready; then
			log "Redis already runs on 127.0.0.1:$REDIS_PORT (reused; pid $(redis_pid))"
			return 0
		fi
		die "our Redis (pid $(redis_pid)) does not answer on 127.0.0.1:$REDIS_PORT (was it started with another GEOTOLL_REDIS_PORT?); run '$0 down' first"
	fi
	if port_in_use "$REDIS_PORT"; then
		die "127.0.0.1:$REDIS_PORT is taken by something that is not this script's Redis; stop it or set GEOTOLL_REDIS_PORT"
	fi
	rm -f "$REDIS_PIDFILE"
	log "starting Redis on 127.0.0.1:$REDIS_PORT (log $REDIS_LOG)"
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
		--daemonize yes --pidfile "$REDIS_PIDFILE" --logfile "$REDIS_LOG" --dir "$STATE" ||
		{
			tail_log "$REDIS_LOG"
			die "redis-server did not start"
		}
	claim "$REDIS_OWNER"
	wait_for "Redis on 127.0.0.1:$REDIS_PORT" "$REDIS_LOG" redis_ready
	log "Redis is up"
}

# redis_down stops Redis if it runs and is ours to stop; it fails when it
# leaves it running.
redis_down() {
	local pid i
	if ! pid=$(redis_pid); then
		log "Redis ($REDIS_PIDFILE) is not running"
		rm -f "$REDIS_PIDFILE" "$REDIS_OWNER"
		return 0
	fi
	ours "$REDIS_OWNER" "Redis on 127.0.0.1:$REDIS_PORT (pid $pid)" || return 1
	log "stopping Redis (pid $pid)"
	kill "$pid"
	for ((i = 0; i < 40; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.25
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "Redis (pid $pid) ignored SIGTERM; sending SIGKILL"
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$REDIS_PIDFILE" "$REDIS_OWNER"
}

# ---------------------------------------------------------- redis cluster ---

# The masters' ports: CLUSTER_PORT and the next two.
cluster_ports() { echo "$CLUSTER_PORT" $((CLUSTER_PORT + 1)) $((CLUSTER_PORT + 2)); }

# cluster_node_pid PORT: the pid of the cluster node this script started on
# PORT, if it still runs.
cluster_node_pid() {
	local file=$CLUSTER_DIR/$1/redis.pid pid
	[[ -f $file ]] || return 1
	pid=$(tr -dc '0-9' <"$file")
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] || return 1
	echo "$pid"
}

cluster_node_ready() {
	[[ $(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]
}

# cluster_ok: every master answers and reports cluster_state:ok.
cluster_ok() {
	local port
	command -v redis-cli >/dev/null 2>&1 || return 1
	for port in $(cluster_ports); do
		redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
}

cluster_addrs() {
	local port out=()
	for port in $(cluster_ports); do out+=("127.0.0.1:$port"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

cluster_up() {
	check_port GEOTOLL_REDIS_CLUSTER_PORT "$CLUSTER_PORT"
	check_port GEOTOLL_REDIS_CLUSTER_PORT "$((CLUSTER_PORT + 2))"
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		apt_install redis-server redis-tools
	fi
	mkdir -p "$CLUSTER_DIR"
	local port dir
	for port in $(cluster_ports); do
		dir=$CLUSTER_DIR/$port
		if cluster_node_pid "$port" >/dev/null; then
			continue
		fi
		if port_in_use "$port"; then
			die "127.0.0.1:$port is taken by something that is not this script's Redis Cluster; stop it or set GEOTOLL_REDIS_CLUSTER_PORT"
		fi
		mkdir -p "$dir"
		claim "$CLUSTER_OWNER"
		log "starting Redis Cluster node on 127.0.0.1:$port (state $dir)"
		# The cluster bus listens on another port: port+10000 by default, which
		# does not exist above 55535, so ours sit 10000 below instead.
		local bus=$((port + 10000))
		((bus <= 65535)) || bus=$((port - 10000))
		redis-server --bind 127.0.0.1 --port "$port" --cluster-port "$bus" --cluster-enabled yes \
			--cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 2000 \
			--save '' --appendonly no --daemonize yes \
			--pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" ||
			{
				tail_log "$dir/redis.log"
				die "redis-server did not start on port $port"
			}
		wait_for "Redis Cluster node on 127.0.0.1:$port" "$dir/redis.log" cluster_node_ready "$port"
	done
	if cluster_ok; then
		log "Redis Cluster is up on $(cluster_addrs)"
		return 0
	fi
	# Fresh nodes know only themselves: join them, with all 16384 slots
	# spread over the three masters.
	local known
	known=$(redis-cli -h 127.0.0.1 -p "$CLUSTER_PORT" cluster info | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')
	if [[ $known == 1 ]]; then
		log "creating the Redis Cluster (3 masters, no replicas)"
		local -a nodes=()
		for port in $(cluster_ports); do nodes+=("127.0.0.1:$port"); done
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$CLUSTER_DIR/create.log" 2>&1 || {
			tail_log "$CLUSTER_DIR/create.log"
			die "redis-cli --cluster create failed"
		}
	fi
	wait_for "Redis Cluster on $(cluster_addrs) (cluster_state:ok)" "$CLUSTER_DIR/create.log" cluster_ok
	log "Redis Cluster is up on $(cluster_addrs)"
}

cluster_down() {
	local port pid i running=
	for port in $(cluster_ports); do
		cluster_node_pid "$port" >/dev/null && running=1
	done
	if [[ -n $running ]] && ! ours "$CLUSTER_OWNER" "the Redis Cluster on $(cluster_addrs)"; then
		return 0
	fi
	for port in $(cluster_ports); do
		if pid=$(cluster_node_pid "$port"); then
			log "stopping Redis Cluster node 127.0.0.1:$port (pid $pid)"
			kill "$pid"
			for ((i = 0; i < 40; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.25
			done
			if kill -0 "$pid" 2>/dev/null; then
				kill -9 "$pid" 2>/dev/null || true
			fi
		fi
	done
	rm -rf "$CLUSTER_DIR" "$CLUSTER_OWNER"
}

# --------------------------------------------------------------- commands ---

cmd_up() {
	check_port GEOTOLL_PG_PORT "$PG_PORT"
	check_port GEOTOLL_REDIS_PORT "$REDIS_PORT"
	need_pg || log "DATABASE_URL is set: not starting PostgreSQL"
	need_redis || log "REDIS_URL is set: not starting Redis"
	if ! need_pg && ! need_redis; then
		return 0
	fi
	mkdir -p "$STATE"
	if docker_usable; then
		docker_up
		return 0
	fi
	if [[ $(recorded_mode) == docker ]]; then
		log "note: a previous 'up' used docker, which no longer answers; starting local services"
	fi
	ensure_packages
	ensure_state_dir
	# Check both ports before starting either, so a conflict leaves nothing
	# half-started.
	if need_pg && ! pg_running && port_in_use "$PG_PORT"; then
		die "127.0.0.1:$PG_PORT is taken by something that is not this script's PostgreSQL; stop it or set GEOTOLL_PG_PORT"
	fi
	if need_redis && ! redis_pid >/dev/null && port_in_use "$REDIS_PORT"; then
		die "127.0.0.1:$REDIS_PORT is taken by something that is not this script's Redis; stop it or set GEOTOLL_REDIS_PORT"
	fi
	record_mode native
	need_pg && pg_up
	need_redis && redis_up
	return 0
}

cmd_down() {
	case $(recorded_mode) in
	docker)
		if command -v docker >/dev/null 2>&1; then
			log "stopping docker compose services"
			compose down
		else
			log "a previous 'up' used docker, but the docker CLI is gone"
		fi
		;;
	*)
		# Only what lives in $STATE: never the system cluster.
		local left=
		if [[ -x $PG_BIN/pg_ctl && -d $PG_DATA ]]; then
			pg_down || left=1
		else
			log "no PostgreSQL cluster in $PG_DATA"
		fi
		redis_down || left=1
		# The mode stays recorded while a service is left running.
		[[ -n $left ]] && return 0
		;;
	esac
	rm -f "$MODE_FILE"
}

cmd_status() {
	local mode rc=0
	mode=$(recorded_mode)
	echo "mode:       $mode (state $STATE)"
	if [[ -n ${DATABASE_URL:-} ]]; then
		echo "postgresql: external (DATABASE_URL)"
	elif [[ $mode == docker ]]; then
		echo "postgresql: docker compose service postgis on 127.0.0.1:$PG_PORT"
		compose ps postgis || rc=1
	elif [[ -x $PG_BIN/pg_ctl ]] && pg_running; then
		if pg_ready; then
			echo "postgresql: running on 127.0.0.1:$PG_PORT, data $PG_DATA, pid $(head -n1 "$PG_DATA/postmaster.pid")"
		else
			echo "postgresql: running (data $PG_DATA) but NOT answering on 127.0.0.1:$PG_PORT"
			rc=1
		fi
	else
		echo "postgresql: stopped"
		rc=1
	fi
	if [[ -n ${REDIS_URL:-} ]]; then
		echo "redis:      external (REDIS_URL)"
	elif [[ $mode == docker ]]; then
		echo "redis:      docker compose service redis on 127.0.0.1:$REDIS_PORT"
		compose ps redis || rc=1
	elif redis_pid >/dev/null; then
		if command -v redis-cli >/dev/null 2>&1 && redis_ready; then
			echo "redis:      running on 127.0.0.1:$REDIS_PORT, pid $(redis_pid)"
		else
			echo "redis:      running (pid $(redis_pid)) but NOT answering on 127.0.0.1:$REDIS_PORT"
			rc=1
		fi
	else
		echo "redis:      stopped"
		rc=1
	fi
	# The cluster is optional (cluster-up): it never makes status fail.
	if cluster_ok; then
		echo "cluster:    running on $(cluster_addrs)"
	else
		echo "cluster:    not running (scripts/services.sh cluster-up)"
	fi
	return "$rc"
}

# emit NAME VALUE: one export line, single-quoted so it is safe to eval.
emit() {
	local q="'\\''"
	printf "export %s='%s'\n" "$1" "${2//\'/$q}"
}

cmd_env() {
	local pg="127.0.0.1:$PG_PORT" redis="redis://127.0.0.1:$REDIS_PORT/0"
	local admin read writer test test_read
	if [[ -n ${DATABASE_URL:-} ]]; then
		admin=${GEOTOLL_ADMIN_DATABASE_URL:-$DATABASE_URL}
		read=$DATABASE_URL
		writer=${GEOTOLL_WRITER_DATABASE_URL:-}
		test=${GEOTOLL_TEST_DATABASE_URL:-$admin}
		test_read=${GEOTOLL_TEST_READ_DATABASE_URL:-$DATABASE_URL}
	else
		admin=${GEOTOLL_ADMIN_DATABASE_URL:-postgres://geotoll@$pg/geotoll?sslmode=disable}
		read=${GEOTOLL_READ_DATABASE_URL:-postgres://geotoll_reader@$pg/geotoll?sslmode=disable}
		writer=${GEOTOLL_WRITER_DATABASE_URL:-postgres://geotoll_fence_writer@$pg/geotoll?sslmode=disable}
		test=${GEOTOLL_TEST_DATABASE_URL:-postgres://geotoll@$pg/geotoll_test?sslmode=disable}
		test_read=${GEOTOLL_TEST_READ_DATABASE_URL:-postgres://geotoll_reader@$pg/geotoll_test?sslmode=disable}
	fi
	if [[ -n ${REDIS_URL:-} ]]; then
		redis=$REDIS_URL
	fi
	emit GEOTOLL_ADMIN_DATABASE_URL "$admin"
	emit GEOTOLL_READ_DATABASE_URL "$read"
	# Fence writes (geofence admin) as the role the migrations create for
	# them; with your own DATABASE_URL, only when you name one.
	[[ -z $writer ]] || emit GEOTOLL_WRITER_DATABASE_URL "$writer"
	emit GEOTOLL_TEST_DATABASE_URL "$test"
	emit GEOTOLL_TEST_READ_DATABASE_URL "$test_read"
	emit GEOTOLL_REDIS_URL "${GEOTOLL_REDIS_URL:-$redis}"
	emit GEOTOLL_TEST_REDIS_URL "${GEOTOLL_TEST_REDIS_URL:-$redis}"
	# Only when a cluster answers (cluster-up), or one was named.
	if [[ -n ${GEOTOLL_TEST_REDIS_CLUSTER_ADDRS:-} ]]; then
		emit GEOTOLL_TEST_REDIS_CLUSTER_ADDRS "$GEOTOLL_TEST_REDIS_CLUSTER_ADDRS"
	elif cluster_ok; then
		emit GEOTOLL_TEST_REDIS_CLUSTER_ADDRS "$(cluster_addrs)"
	fi
}

main() {
	local cmd=${1:-up}
	if [[ ${2:-} == --force ]]; then
		FORCE=1
	elif [[ -n ${2:-} ]]; then
		die "unknown option '$2' (only 'down --force' and 'cluster-down --force')"
	fi
	case $cmd in
	up | down | cluster-up | cluster-down) take_turn "$@" ;;
	esac
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	env) cmd_env ;;
	cluster-up) cluster_up ;;
	cluster-down) cluster_down ;;
	-h | --help | help) sed -n '2,40p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
	*) die "unknown command '$cmd' (use up, down, status, env, cluster-up or cluster-down)" ;;
	esac
}

main "$@"
