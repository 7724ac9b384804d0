#!/usr/bin/env bash
# Run the distributed roles of jlse on this machine (make cluster-up / cluster-down / worker ...).
#
#   scripts/cluster.sh up        start dispatcher, $WORKERS workers, learner and Flower in the
#                                background; return when all are healthy (or fail, stopping
#                                what this call started)
#   scripts/cluster.sh down      stop every role recorded under $RUN_DIR
#   scripts/cluster.sh run ROLE  run one role in the foreground (dispatcher|worker|learner|flower)
#   scripts/cluster.sh status    `jlse status` against the backends `up` chose
#
# The roles read REDIS_URL, CELERY_BROKER_URL, DATABASE_URL and PGPASSWORD from the environment
# (defaults: the local Redis and PostgreSQL); see deploy/README.md.
#
# SHARDS > 1 (with REDIS_URL unset): `up` first starts a local Redis Cluster of SHARDS masters
# (REDIS_REPLICAS replicas each, ports from REDIS_CLUSTER_PORT; scripts/redis-cluster.sh) for the
# frontier, takes RabbitMQ on 127.0.0.1:5672 as the broker (unless CELERY_BROKER_URL is set: a
# Redis Cluster cannot carry Celery's broker) and runs one dispatcher per shard
# (`jlse dispatcher --shard i/SHARDS`; DISPATCHERS=n for n of them, 1 serving every shard). Those URLs are kept in $RUN_DIR/cluster.env for `run`,
# `status` and `down`, which also stops that Redis Cluster.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JLSE=${JLSE:-$ROOT/.venv/bin/jlse}
CELERY=${CELERY:-$ROOT/.venv/bin/celery}
CELERY_APP=${CELERY_APP:-jlse.workers.celery_app}
RUN_DIR=${RUN_DIR:-runs/cluster}
WORKERS=${WORKERS:-2}
CONCURRENCY=${CONCURRENCY:-}          # fetch threads per worker; empty = jlse's default
NODE_HOST=${NODE_HOST:-$(hostname -s)}
FLOWER_PORT=${FLOWER_PORT:-5555}
FLOWER_ADDRESS=${FLOWER_ADDRESS:-127.0.0.1}
UP_TIMEOUT=${UP_TIMEOUT:-60}          # seconds for every role to become healthy
STOP_GRACE=${STOP_GRACE:-30}          # seconds between TERM (Celery warm shutdown) and KILL
SETTLE=${SETTLE:-3}                   # seconds a role without a health probe must stay up
TAIL_LINES=${TAIL_LINES:-25}
METRICS_PORT=${METRICS_PORT:-}        # Prometheus: dispatcher on it, worker N on it + N (127.0.0.1)
SHARDS=${SHARDS:-1}                   # frontier shards: > 1 starts a Redis Cluster (see above)
DISPATCHERS=${DISPATCHERS:-$SHARDS}   # dispatcher i of n serves the shards s with s % n == i
REDIS_REPLICAS=${REDIS_REPLICAS:-1}
REDIS_CLUSTER_PORT=${REDIS_CLUSTER_PORT:-7101}
RABBITMQ_URL=${RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672//}

read -ra JLSE_CMD <<<"$JLSE"
read -ra CELERY_CMD <<<"$CELERY"
STARTED=()

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: ERROR: %s\n' "$*" >&2; exit 1; }
redact() {  # the shell's twin of jlse/redact.py: URL passwords and secret parameters
  sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#; s#([?&][^=&]*(pass|pwd|secret|token|api[-_]?key)[^=&]*=)[^&[:space:]]*#\1***#Ig'
}

pid_file() { printf '%s/%s.pid' "$RUN_DIR" "$1"; }
log_file() { printf '%s/%s.log' "$RUN_DIR" "$1"; }

read_pid() {  # ROLE -> its recorded pid on stdout; fails without a valid pid file
  local pid
  pid=$(head -n 1 "$(pid_file "$1")" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  printf '%s' "$pid"
}

pid_running() {  # PID -> 0 if that process exists and is not a zombie
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $stat != Z* ]]
}

role_alive() {  # ROLE -> 0 if its recorded process runs and still leads the session we created
  local pid sid
  pid=$(read_pid "$1") || return 1
  pid_running "$pid" || return 1
  sid=$(ps -o sid= -p "$pid" 2>/dev/null | tr -d ' ') || return 1
  [ "$sid" = "$pid" ]  # guards against a recycled pid
}

group_running() {  # PGID -> 0 if any process of that group is left
  pgrep -g "$1" >/dev/null 2>&1
}

node_name() {  # worker or learner role -> its Celery node name
  case $1 in
    worker) printf '%s' "${WORKER_NAME:-worker@$NODE_HOST}" ;;
    learner) printf '%s' "${LEARNER_NAME:-learner@$NODE_HOST}" ;;
    *) printf '%s@%s' "$1" "$NODE_HOST" ;;
  esac
}

metrics_port() {  # ROLE -> its Prometheus port on stdout (nothing: no metrics for it)
  [ -n "$METRICS_PORT" ] || return 0
  case $1 in
    dispatcher) printf '%s' "$METRICS_PORT" ;;
    worker) printf '%s' "$((METRICS_PORT + 1))" ;;
    worker*) printf '%s' "$((METRICS_PORT + ${1#worker}))" ;;
  esac
}

role_command() {  # ROLE -> sets CMD to the command line that runs it
  local role=$1 port
  port=$(metrics_port "$role")
  case $role in
    dispatcher*) CMD=(env "JLSE_DISPATCHER_METRICS_PORT=$port") ;;
    worker*) CMD=(env "JLSE_WORKER_METRICS_PORT=$port") ;;
  esac
  [ -n "$port" ] || CMD=()
  case $role in
    dispatcher) CMD+=("${JLSE_CMD[@]}" dispatcher) ;;
    dispatcher*) CMD+=("${JLSE_CMD[@]}" dispatcher --shard "$((${role#dispatcher} - 1))/$DISPATCHERS") ;;
    learner) CMD=("${JLSE_CMD[@]}" learner --hostname "$(node_name learner)") ;;
    worker*)
      CMD+=("${JLSE_CMD[@]}" worker --hostname "$(node_name "$role")")
      if [ -n "$CONCURRENCY" ]; then CMD+=(--concurrency "$CONCURRENCY"); fi ;;
    flower)
      CMD=("${CELERY_CMD[@]}" -A "$CELERY_APP" flower
        --port="$FLOWER_PORT" --address="$FLOWER_ADDRESS") ;;
    *) die "unknown role '$role' (dispatcher, worker, learner, flower)" ;;
  esac
}

flower_auth_file() { printf '%s/flower-auth' "$RUN_DIR"; }

prepare_flower_env() {
  # Flower always runs behind basic auth: its pages show task arguments (URLs, anchor text).
  # Flower reads FLOWER_BASIC_AUTH itself, so the password stays out of `ps` output. Without
  # one in the environment, a password is generated once, kept in $RUN_DIR/flower-auth (mode
  # 600, reused by later starts) and printed when it is made.
  local file
  file=$(flower_auth_file)
  if [ -z "${FLOWER_BASIC_AUTH:-}" ] && [ -s "$file" ]; then
    FLOWER_BASIC_AUTH=$(head -n 1 "$file")
  elif [ -z "${FLOWER_BASIC_AUTH:-}" ]; then
    mkdir -p "$RUN_DIR"
    FLOWER_BASIC_AUTH="admin:$(LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 24 || true)"
    (umask 077 && printf '%s\n' "$FLOWER_BASIC_AUTH" >"$file")
    say "Flower login (generated, shown once; kept in $file): $FLOWER_BASIC_AUTH"
  fi
  [[ $FLOWER_BASIC_AUTH == ?*:?* ]] || die "FLOWER_BASIC_AUTH must be user:password"
  export FLOWER_BASIC_AUTH
}

cluster_roles() {  # the roles `up` manages, one a line
  if [ "$DISPATCHERS" -gt 1 ]; then seq -f 'dispatcher%g' 1 "$DISPATCHERS"
  else printf '%s\n' dispatcher; fi
  seq -f 'worker%g' 1 "$WORKERS"
  printf '%s\n' learner flower
}

start_role() {  # ROLE -> started in its own session, pid recorded
  local role=$1 log port
  log=$(log_file "$role")
  role_command "$role"
  printf '\n=== %s cluster.sh starting: %s\n' "$(date '+%F %T')" "${CMD[*]}" >>"$log"
  # setsid: the role leads its own process group, so `down` can also reap its pool children.
  # 9>&- keeps the lock below from living on in the role.
  setsid "${CMD[@]}" >>"$log" 2>&1 </dev/null 9>&- &
  echo "$!" >"$(pid_file "$role")"
  STARTED+=("$role")
  say "started $role (pid $!, log $log)"
  port=$(metrics_port "$role")
  if [ -n "$port" ]; then say "$role metrics: http://127.0.0.1:$port/metrics"; fi
}

flower_answers() {  # 0 if an HTTP server answers on Flower's port (any status: 401 counts)
  local host=$FLOWER_ADDRESS
  case $host in '' | 0.0.0.0 | '*') host=127.0.0.1 ;; esac
  timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "GET /healthcheck HTTP/1.0\r\nHost: %s\r\n\r\n" "$0" >&3
    IFS= read -r line <&3 && [[ $line == HTTP/* ]]' "$host" "$FLOWER_PORT" 2>/dev/null
}

node_answers_ping() {  # ROLE -> 0 if its Celery node answers a ping
  "${CELERY_CMD[@]}" -A "$CELERY_APP" inspect ping -d "$(node_name "$1")" --timeout 2 \
    >/dev/null 2>&1
}

up_long_enough() {  # ROLE -> 0 once it has been running for $SETTLE seconds
  local pid elapsed
  pid=$(read_pid "$1") || return 1
  elapsed=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ') || return 1
  [ "${elapsed:-0}" -ge "$SETTLE" ]
}

role_healthy() {  # ROLE -> 0 if it does its job as far as we can see from here
  role_alive "$1" || return 1
  case $1 in
    worker* | learner) node_answers_ping "$1" ;;
    flower) flower_answers ;;
    *) up_long_enough "$1" ;;
  esac
}

show_failure() {  # ROLE REASON -> the reason and the tail of the role's log, on stderr
  {
    printf 'cluster: ERROR: %s %s; last lines of %s:\n' "$1" "$2" "$(log_file "$1")"
    tail -n "$TAIL_LINES" "$(log_file "$1")" 2>/dev/null | sed 's/^/    /'
  } >&2
}

wait_healthy() {  # ROLE... -> 0 when all are healthy; 1 (after showing why) otherwise
  local deadline=$((SECONDS + UP_TIMEOUT)) pending=("$@") waiting role
  while :; do
    waiting=()
    for role in "${pending[@]}"; do
      role_alive "$role" || { show_failure "$role" "exited during start-up"; return 1; }
      role_healthy "$role" || waiting+=("$role")
    done
    [ ${#waiting[@]} -eq 0 ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
      for role in "${waiting[@]}"; do show_failure "$role" "not healthy after ${UP_TIMEOUT}s"; done
      return 1
    fi
    pending=("${waiting[@]}")
    sleep 1
  done
  for role in "$@"; do  # a role may have died while the others were still starting
    role_alive "$role" || { show_failure "$role" "exited during start-up"; return 1; }
  done
}

stop_roles() {  # ROLE... -> TERM each, wait up to STOP_GRACE, KILL the rest; 0 if none is left
  local role pid pids=() deadline=$((SECONDS + STOP_GRACE)) left=0
  for role in "$@"; do
    pid=$(read_pid "$role") || continue
    if role_alive "$role"; then
      kill -TERM "$pid" 2>/dev/null || true  # main process only: Celery's warm shutdown
      say "stopping $role (pid $pid)"
      pids+=("$pid")
    elif ! pid_running "$pid" && group_running "$pid"; then
      pids+=("$pid")  # the main process is gone but its pool children are not
    fi
  done
  for pid in "${pids[@]}"; do
    while pid_running "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  done
  for pid in "${pids[@]}"; do
    if pid_running "$pid"; then say "pid $pid ignored TERM for ${STOP_GRACE}s: KILL"; fi
    if group_running "$pid"; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do group_running "$pid" || break; sleep 0.1; done
    if group_running "$pid"; then say "ERROR: process group $pid survives KILL"; left=1; fi
  done
  for role in "$@"; do rm -f "$(pid_file "$role")"; done
  return "$left"
}

take_lock() {  # one up/down at a time per run directory
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  flock -w 120 9 || die "another cluster.sh holds $RUN_DIR/.lock"
}

show_backends() {
  say "REDIS_URL=${REDIS_URL:-(default: redis://127.0.0.1:6379/0)}" | redact
  say "CELERY_BROKER_URL=${CELERY_BROKER_URL:-(default: the REDIS_URL host, db 1)}" | redact
  say "DATABASE_URL=${DATABASE_URL:-(default: postgresql://postgres@127.0.0.1:5432/jlse)}" | redact
}

env_file() { printf '%s/cluster.env' "$RUN_DIR"; }

load_env() {  # the backends `up` chose (a Redis Cluster, RabbitMQ), unless set by the caller
  local file name value
  file=$(env_file)
  [ -f "$file" ] || return 0
  while IFS='=' read -r name value; do
    case $name in
      REDIS_URL | CELERY_BROKER_URL) [ -n "${!name:-}" ] || export "$name=$value" ;;
    esac
  done <"$file"
}

rabbitmq_answers() {
  timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/5672' 2>/dev/null
}

prepare_shards() {  # SHARDS > 1: a Redis Cluster for the frontier and RabbitMQ as the broker
  [ "$SHARDS" -gt 1 ] || return 0
  if [ -z "${REDIS_URL:-}" ]; then
    # 9>&-: the Redis daemons must not inherit (and hold) the lock below
    "$ROOT/scripts/redis-cluster.sh" start "$RUN_DIR/redis-cluster" "$REDIS_CLUSTER_PORT" \
      "$SHARDS" "$REDIS_REPLICAS" 9>&- | sed 's/^/cluster: /'
    export REDIS_URL="redis+cluster://127.0.0.1:$REDIS_CLUSTER_PORT"
  fi
  if [ -z "${CELERY_BROKER_URL:-}" ]; then
    rabbitmq_answers || die "SHARDS=$SHARDS needs a broker off the frontier's Redis: start \
RabbitMQ on 127.0.0.1:5672 (Debian: apt install rabbitmq-server) or set CELERY_BROKER_URL"
    export CELERY_BROKER_URL=$RABBITMQ_URL
  fi
  printf 'REDIS_URL=%s\nCELERY_BROKER_URL=%s\n' "$REDIS_URL" "$CELERY_BROKER_URL" >"$(env_file)"
  say "frontier: $SHARDS shards; crawl with --frontier $REDIS_URL --set frontier_shards=$SHARDS" \
    | redact
}

cmd_up() {
  local roles role
  [[ $WORKERS =~ ^[1-9][0-9]*$ ]] || die "WORKERS must be a positive integer, not '$WORKERS'"
  [[ $SHARDS =~ ^[1-9][0-9]*$ ]] || die "SHARDS must be a positive integer, not '$SHARDS'"
  [[ $DISPATCHERS =~ ^[1-9][0-9]*$ ]] ||
    die "DISPATCHERS must be a positive integer, not '$DISPATCHERS'"
  [[ $METRICS_PORT =~ ^([1-9][0-9]*)?$ ]] && [ "${METRICS_PORT:-0}" -le $((65535 - WORKERS)) ] ||
    die "METRICS_PORT must be a TCP port with room for $WORKERS workers above it, not '$METRICS_PORT'"
  mapfile -t roles < <(cluster_roles)
  take_lock
  load_env
  prepare_shards
  prepare_flower_env
  show_backends
  for role in "${roles[@]}"; do
    if role_alive "$role"; then
      say "$role already running (pid $(read_pid "$role"))"
    else
      start_role "$role"
    fi
  done
  if ! wait_healthy "${roles[@]}"; then
    if [ ${#STARTED[@]} -gt 0 ]; then
      say "stopping what this call started: ${STARTED[*]}"
      STOP_GRACE=${UP_FAIL_GRACE:-10} stop_roles "${STARTED[@]}" || true
    fi
    exit 1
  fi
  # Flower also re-enables events periodically; this makes the first tasks visible at once.
  "${CELERY_CMD[@]}" -A "$CELERY_APP" control enable_events --timeout 2 >/dev/null 2>&1 || true
  say "all ${#roles[@]} roles healthy; Flower: http://$FLOWER_ADDRESS:$FLOWER_PORT/ ; logs: $RUN_DIR/"
}

cmd_down() {
  local files roles=() file
  take_lock
  shopt -s nullglob
  files=("$RUN_DIR"/*.pid)
  for file in "${files[@]}"; do roles+=("$(basename "$file" .pid)"); done
  if [ ${#roles[@]} -eq 0 ]; then
    say "nothing running (no pid files in $RUN_DIR)"
  else
    stop_roles "${roles[@]}" || die "some processes could not be stopped"
    say "stopped: ${roles[*]}"
  fi
  if [ -d "$RUN_DIR/redis-cluster" ]; then
    "$ROOT/scripts/redis-cluster.sh" stop "$RUN_DIR/redis-cluster" 9>&- | sed 's/^/cluster: /'
  fi
  rm -f "$(env_file)"
}

cmd_status() {  # jlse status against the backends `up` chose
  load_env
  exec "${JLSE_CMD[@]}" status "$@"
}

cmd_run() {  # ROLE -> replaces this shell with the role, in the foreground
  local role=${1:?usage: cluster.sh run dispatcher|worker|learner|flower}
  load_env
  [ "$role" = flower ] && prepare_flower_env
  role_command "$role"
  show_backends >&2
  exec "${CMD[@]}"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  run) shift; cmd_run "$@" ;;
  status) shift; cmd_status "$@" ;;
  *) die "usage: cluster.sh up | down | status | run ROLE" ;;
esac
