#!/usr/bin/env bash
# Starts and stops the servers the tests run against: PostgreSQL, an S3
# server (versitygw) and Redis. Installs what is missing, so a fresh machine
# works.
#
#   services.sh start   start what is not running; print export lines on stdout
#   services.sh stop    stop what start started, by PID
#
# start prints ENGINE_TEST_SERVICES_STARTED, the services this start
# launched; stop stops those when it is set, otherwise every service a
# start launched and left recorded in the state directory.
set -euo pipefail

PG_VERSION=${PG_VERSION:-15}
PG_CLUSTER=${PG_CLUSTER:-main}
PG_DSN="postgres://engine:engine@127.0.0.1:5432/engine_test?sslmode=disable"
VERSITYGW_VERSION=v1.8.0
S3_ADDR=127.0.0.1:17070
S3_ACCESS_KEY=testaccess
S3_SECRET_KEY=testsecret
STATE_DIR=${ENGINE_TEST_SERVICES_DIR:-${TMPDIR:-/tmp}/abi-engine-testservices}
VGW_PID_FILE=$STATE_DIR/versitygw.pid
PG_MARK_FILE=$STATE_DIR/postgresql.started
REDIS_PID_FILE=$STATE_DIR/redis.pid
REDIS_ADDR_FILE=$STATE_DIR/redis.addr

log() { echo "services: $*" >&2; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# port_answers is true when something accepts connections on host:port.
port_answers() {
	(exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null
}

# wait_until retries a command every 0.1 s for up to $1 seconds.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
		sleep 0.1
	done
}

vgw_pid_alive() {
	local pid
	[ -f "$VGW_PID_FILE" ] || return 1
	pid=$(cat "$VGW_PID_FILE")
	kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q versitygw
}

pg_running() {
	as_root pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" status >/dev/null 2>&1
}

pg_ready() {
	pg_isready -q -h /var/run/postgresql
}

# start_postgresql prints "postgresql" when it started the cluster.
start_postgresql() {
	local installed=""
	if ! command -v pg_ctlcluster >/dev/null 2>&1; then
		log "installing PostgreSQL with apt-get"
		as_root apt-get update >&2
		DEBIAN_FRONTEND=noninteractive as_root apt-get install -y postgresql >&2
		installed=1
	fi
	mkdir -p "$STATE_DIR"
	if [ -n "$installed" ] && pg_running; then
		# the package's install script started the cluster: ours to stop
		touch "$PG_MARK_FILE"
		echo postgresql
	elif ! pg_running; then
		log "starting PostgreSQL $PG_VERSION/$PG_CLUSTER"
		# exit status 2 means another caller started it meanwhile
		as_root pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start </dev/null >&2 || [ $? -eq 2 ]
		touch "$PG_MARK_FILE"
		echo postgresql
	fi
	wait_until 60 pg_ready || { log "PostgreSQL did not answer within 60 s"; exit 1; }
	as_root runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -d postgres >&2 <<'SQL'
SELECT 'CREATE ROLE engine LOGIN CREATEDB PASSWORD ''engine'''
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'engine')\gexec
SELECT 'CREATE DATABASE engine_test OWNER engine'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'engine_test')\gexec
SQL
}

# start_versitygw prints "versitygw" when it started the server.
start_versitygw() {
	local bin data
	bin=$(go env GOPATH)/bin/versitygw
	if vgw_pid_alive; then
		wait_until 30 port_answers "$S3_ADDR" || { log "versitygw (pid $(cat "$VGW_PID_FILE")) does not answer on $S3_ADDR"; exit 1; }
		return
	fi
	if port_answers "$S3_ADDR"; then
		log "an S3 server started elsewhere answers on $S3_ADDR; using it"
		return
	fi
	if [ ! -x "$bin" ]; then
		log "installing versitygw $VERSITYGW_VERSION with go install"
		go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
	fi
	mkdir -p "$STATE_DIR"
	data=$(mktemp -d "$STATE_DIR/s3-data.XXXXXX")
	log "starting versitygw on $S3_ADDR, data under $data"
	ROOT_ACCESS_KEY_ID=$S3_ACCESS_KEY ROOT_SECRET_ACCESS_KEY=$S3_SECRET_KEY \
		setsid "$bin" --quiet --port "$S3_ADDR" posix "$data" \
		</dev/null >"$STATE_DIR/versitygw.log" 2>&1 &
	echo $! >"$VGW_PID_FILE"
	echo "$data" >"$STATE_DIR/versitygw.data"
	if ! wait_until 30 port_answers "$S3_ADDR"; then
		log "versitygw did not answer on $S3_ADDR within 30 s; its log:"
		cat "$STATE_DIR/versitygw.log" >&2
		stop_versitygw
		exit 1
	fi
	echo versitygw
}

redis_pid_alive() {
	local pid
	[ -f "$REDIS_PID_FILE" ] || return 1
	pid=$(cat "$REDIS_PID_FILE")
	kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q redis-server
}

# start_redis prints "redis" when it started a server. The server is our
# own, on a free loopback port (not the packaged service's 6379), without
# persistence; its address goes to $REDIS_ADDR_FILE.
start_redis() {
	local attempt port pid
	if redis_pid_alive; then
		wait_until 30 port_answers "$(cat "$REDIS_ADDR_FILE")" || { log "redis-server (pid $(cat "$REDIS_PID_FILE")) does not answer"; exit 1; }
		return
	fi
	if ! command -v redis-server >/dev/null 2>&1; then
		log "installing redis-server with apt-get"
		as_root apt-get update >&2
		DEBIAN_FRONTEND=noninteractive as_root apt-get install -y redis-server >&2
	fi
	mkdir -p "$STATE_DIR"
	for attempt in 1 2 3 4 5 6 7 8 9 10; do
		port=$((20000 + RANDOM % 20000))
		if port_answers "127.0.0.1:$port"; then continue; fi
		log "starting redis-server on 127.0.0.1:$port"
		setsid redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$STATE_DIR" \
			</dev/null >"$STATE_DIR/redis.log" 2>&1 &
		pid=$!
		# Another process may take the port in between: then the server
		# exits at once, and the next attempt picks another.
		if wait_until 10 port_answers "127.0.0.1:$port" && kill -0 "$pid" 2>/dev/null; then
			echo "$pid" >"$REDIS_PID_FILE"
			echo "127.0.0.1:$port" >"$REDIS_ADDR_FILE"
			echo redis
			return
		fi
		kill -TERM "$pid" 2>/dev/null || true
	done
	log "redis-server did not start on a free port in 10 attempts; its log:"
	cat "$STATE_DIR/redis.log" >&2
	exit 1
}

start() {
	local pg vgw redis started
	pg=$(start_postgresql)
	if ! vgw=$(start_versitygw); then
		if [ -n "$pg" ]; then stop_postgresql; fi
		exit 1
	fi
	if ! redis=$(start_redis); then
		if [ -n "$vgw" ]; then stop_versitygw; fi
		if [ -n "$pg" ]; then stop_postgresql; fi
		exit 1
	fi
	started=$(echo $pg $vgw $redis)
	cat <<EXPORTS
export ENGINE_TEST_PG_DSN='$PG_DSN'
export ENGINE_TEST_S3_ENDPOINT='http://$S3_ADDR'
export ENGINE_TEST_S3_ACCESS_KEY='$S3_ACCESS_KEY'
export ENGINE_TEST_S3_SECRET_KEY='$S3_SECRET_KEY'
export ENGINE_TEST_REDIS_ADDR='$(cat "$REDIS_ADDR_FILE")'
export ENGINE_TEST_SERVICES_STARTED='$started'
EXPORTS
}

stop_versitygw() {
	local pid
	if ! vgw_pid_alive; then
		rm -f "$VGW_PID_FILE"
		return
	fi
	pid=$(cat "$VGW_PID_FILE")
	log "stopping versitygw (pid $pid)"
	kill -TERM "$pid"
	wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null || true
	rm -f "$VGW_PID_FILE"
	if [ -f "$STATE_DIR/versitygw.data" ]; then
		rm -rf "$(cat "$STATE_DIR/versitygw.data")" "$STATE_DIR/versitygw.data"
	fi
}

stop_postgresql() {
	[ -f "$PG_MARK_FILE" ] || return 0
	rm -f "$PG_MARK_FILE"
	if pg_running; then
		log "stopping PostgreSQL $PG_VERSION/$PG_CLUSTER"
		as_root pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" stop >&2
	fi
}

stop_redis() {
	local pid
	if ! redis_pid_alive; then
		rm -f "$REDIS_PID_FILE" "$REDIS_ADDR_FILE"
		return
	fi
	pid=$(cat "$REDIS_PID_FILE")
	log "stopping redis-server (pid $pid)"
	kill -TERM "$pid"
	wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null || true
	rm -f "$REDIS_PID_FILE" "$REDIS_ADDR_FILE"
}

stop() {
	local which=${ENGINE_TEST_SERVICES_STARTED-redis versitygw postgresql}
	for s in $which; do
		case $s in
		redis) stop_redis ;;
		versitygw) stop_versitygw ;;
		postgresql) stop_postgresql ;;
		esac
	done
}

case ${1:-} in
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 start|stop" >&2
	exit 2
	;;
esac
