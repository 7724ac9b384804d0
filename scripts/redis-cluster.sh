#!/usr/bin/env bash
# A local Redis Cluster for the distributed frontier (make redis-cluster-up / -down, the tests).
#
#   scripts/redis-cluster.sh start DIR BASE_PORT MASTERS REPLICAS
#       start MASTERS*(1+REPLICAS) nodes on 127.0.0.1:BASE_PORT.. (cluster bus: port+10000),
#       create the cluster and wait until it is healthy; files of each node live in DIR.
#       A cluster of DIR that is already up and healthy is left as it is.
#   scripts/redis-cluster.sh stop DIR        stop every node started from DIR, remove its files
#   scripts/redis-cluster.sh status DIR      one line per node: port, role, slots, up/down
#   scripts/redis-cluster.sh restart-node DIR PORT
#       start one stopped node of DIR again from its nodes.conf (it rejoins the cluster)
#
# INSTALL_MISSING=1 (make redis-cluster-up): install redis-server with apt if it is missing.
# REDIS_CLUSTER_HOST: the address the nodes listen on (127.0.0.1; the tests' bridge address
# for worker hosts in network namespaces).
set -euo pipefail

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
HOST=${REDIS_CLUSTER_HOST:-127.0.0.1}  # the nodes listen and announce themselves there
UP_TIMEOUT=${UP_TIMEOUT:-30}   # seconds for the nodes to listen and the cluster to become healthy
STOP_GRACE=${STOP_GRACE:-5}    # seconds between SIGTERM and SIGKILL

# The frontier's memory model relies on these (docs: "Redis Cluster"): small sets of integers
# (dedup fingerprints) stay intsets, small per-host hashes and queues stay listpacks.
MEMORY_SETTINGS=(
  --set-max-intset-entries 4096
  --hash-max-listpack-entries 512
  --hash-max-listpack-value 1024
  --zset-max-listpack-entries 256
  --zset-max-listpack-value 64
)
# repl-diskless-sync-delay 0: a replica's first sync starts at once instead of after 5 s; a
# replica that never completed it cannot be promoted (its data counts as too old).
NODE_SETTINGS=(
  --daemonize yes --cluster-enabled yes --cluster-node-timeout 2000
  --save "" --appendonly no --maxmemory-policy noeviction
  --protected-mode no --bind "$HOST" --repl-diskless-sync-delay 0
  # a master down (before its replica takes over, or with none) stops only its own slots:
  # the frontier's other shards go on serving their hosts
  --cluster-require-full-coverage no
)

say() { printf 'redis-cluster: %s\n' "$*"; }
die() { printf 'redis-cluster: ERROR: %s\n' "$*" >&2; exit 1; }
usage() { { echo usage:; sed -n '4,13p' "$0" | sed 's/^# \{0,1\}//'; } >&2; exit 2; }

is_count() { [[ $1 =~ ^[0-9]+$ ]]; }
cli_raw() { local port=$1; shift; "$REDIS_CLI" -h "$HOST" -p "$port" "$@" 2>/dev/null; }
pid_file() { printf '%s/node-%s.pid' "$DIR" "$1"; }
log_file() { printf '%s/node-%s.log' "$DIR" "$1"; }
state_file() { printf '%s/cluster.env' "$DIR"; }

listening() {  # PORT -> 0 if something accepts TCP connections on HOST:PORT
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

node_pid() {  # PORT -> the pid recorded for that node of DIR, if it is still a redis-server
  local pid
  pid=$(head -n 1 "$(pid_file "$1")" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "redis-server.*:$1\b" || return 1
  printf '%s' "$pid"
}

node_up() {  # PORT -> 0 if our node answers on it (the process on the port is the recorded one)
  local pid served
  pid=$(node_pid "$1") || return 1
  served=$(cli_raw "$1" info server | tr -d '\r' | sed -n 's/^process_id://p')
  [[ $served == "$pid" ]]
}

field() {  # PORT SECTION-COMMAND... FIELD -> the value of FIELD in an INFO-style reply
  local port=$1 name=${*: -1}
  cli_raw "$port" "${@:2:$#-2}" | tr -d '\r' | sed -n "s/^$name://p"
}

load_state() {  # reads BASE_PORT, MASTERS, REPLICAS and PORTS of DIR's cluster
  [[ -f $(state_file) ]] || return 1
  local key value i
  BASE_PORT="" MASTERS="" REPLICAS=""
  while IFS='=' read -r key value; do
    [[ $key =~ ^(BASE_PORT|MASTERS|REPLICAS)$ ]] && is_count "$value" && printf -v "$key" %s "$value"
  done <"$(state_file)"
  [[ -n $BASE_PORT && -n $MASTERS && -n $REPLICAS ]] || return 1
  PORTS=()
  for ((i = 0; i < MASTERS * (1 + REPLICAS); i++)); do PORTS+=($((BASE_PORT + i))); done
}

healthy() {  # 0 if every node is up, reports cluster_state:ok, each master has its replicas
  local port masters=0  # and each replica has completed its sync (else it could not take over)
  for port in "${PORTS[@]}"; do
    node_up "$port" || return 1
    [[ $(field "$port" cluster info cluster_state) == ok ]] || return 1
    [[ $(field "$port" cluster info cluster_slots_assigned) == 16384 ]] || return 1
    if [[ $(field "$port" info replication role) == master ]]; then
      masters=$((masters + 1))
      [[ $(field "$port" info replication connected_slaves) == "$REPLICAS" ]] || return 1
    else
      [[ $(field "$port" info replication master_link_status) == up ]] || return 1
    fi
  done
  [[ $masters == "$MASTERS" ]]
}

start_node() {  # PORT: start one node of DIR (from its nodes.conf if there is one)
  local port=$1
  "$REDIS_SERVER" --port "$port" --dir "$DIR" \
    --cluster-config-file "nodes-$port.conf" --dbfilename "dump-$port.rdb" \
    --pidfile "$(pid_file "$port")" --logfile "$(log_file "$port")" \
    "${NODE_SETTINGS[@]}" "${MEMORY_SETTINGS[@]}" >/dev/null \
    || die "redis-server on port $port did not start; see $(log_file "$port")"
}

wait_node() {  # PORT: until our node answers on it, or fail with its log
  local port=$1 deadline=$((SECONDS + UP_TIMEOUT))
  until node_up "$port"; do
    if ((SECONDS >= deadline)) || grep -qE 'aborting|Could not|FATAL' "$(log_file "$port")" 2>/dev/null
    then
      tail -n 5 "$(log_file "$port")" >&2 2>/dev/null || true
      die "node $port did not come up (log: $(log_file "$port"))"
    fi
    sleep 0.1
  done
}

remove_files() {
  rm -f "$DIR"/node-*.pid "$DIR"/node-*.log "$DIR"/nodes-*.conf "$DIR"/dump-*.rdb \
        "$DIR"/temp-*.rdb "$DIR/create.log" "$(state_file)"
}

check_ports_free() {
  local port
  for port in "${PORTS[@]}"; do
    listening "$port" && die "port $port is already in use by another process" \
                             "(not a node of $DIR); choose another BASE_PORT"
    listening $((port + 10000)) && die "cluster bus port $((port + 10000)) (port $port + 10000)" \
                                       "is already in use; choose another BASE_PORT"
  done
  return 0
}

running_nodes() {  # the number of DIR's recorded nodes that are running
  local pidfile port count=0
  for pidfile in "$DIR"/node-*.pid; do
    [[ -e $pidfile ]] || continue
    port=${pidfile##*/node-}; port=${port%.pid}
    node_pid "$port" >/dev/null && count=$((count + 1))
  done
  echo "$count"
}

abort_start() {  # EXIT trap of a start: if it failed, stop the nodes it started (logs kept)
  local rc=$?
  ((rc == 0)) && return 0
  stop_nodes
  say "start failed: stopped the $STOPPED node(s) it had started; logs in $DIR" >&2
  exit "$rc"
}

wait_healthy() {
  local deadline=$((SECONDS + UP_TIMEOUT))
  until healthy; do
    ((SECONDS < deadline)) || die "the cluster in $DIR was not healthy within ${UP_TIMEOUT}s" \
                                  "(cluster_state:ok on every node, $REPLICAS replica(s) per" \
                                  "master); see: $0 status $DIR"
    sleep 0.2
  done
}

cmd_start() {
  (($# == 4)) || usage
  local base=$2 masters=$3 replicas=$4 port
  is_count "$base" && is_count "$masters" && is_count "$replicas" || usage
  ((masters >= 3)) || die "a Redis Cluster needs at least 3 masters (got $masters)"
  mkdir -p "$1"
  DIR=$(cd "$1" && pwd)
  if load_state; then
    [[ $BASE_PORT == "$base" && $MASTERS == "$masters" && $REPLICAS == "$replicas" ]] ||
      die "$DIR holds another cluster (base port $BASE_PORT, $MASTERS masters, $REPLICAS" \
          "replicas); stop it first: $0 stop $DIR"
    healthy && { say "the cluster in $DIR is already up and healthy (ports" \
                     "${PORTS[0]}-${PORTS[-1]})"; echo "REDIS_URL=redis+cluster://$HOST:$base"
                   return 0; }
  fi
  [[ $(running_nodes) == 0 ]] ||
    die "the cluster in $DIR is partly running and not healthy; stop it first: $0 stop $DIR"
  remove_files  # files of a cluster that died: a new cluster needs empty nodes.conf
  BASE_PORT=$base MASTERS=$masters REPLICAS=$replicas
  PORTS=()
  for ((port = base; port < base + masters * (1 + replicas); port++)); do PORTS+=("$port"); done
  check_ports_free
  printf 'BASE_PORT=%s\nMASTERS=%s\nREPLICAS=%s\n' "$base" "$masters" "$replicas" >"$(state_file)"
  local began=$SECONDS
  trap abort_start EXIT
  for port in "${PORTS[@]}"; do start_node "$port"; done
  for port in "${PORTS[@]}"; do wait_node "$port"; done
  local nodes=()
  for port in "${PORTS[@]}"; do nodes+=("$HOST:$port"); done
  "$REDIS_CLI" --cluster create "${nodes[@]}" --cluster-replicas "$replicas" --cluster-yes \
    >"$DIR/create.log" 2>&1 || { cat "$DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
  wait_healthy
  trap - EXIT
  say "up: $masters masters, $replicas replica(s) each, ports ${PORTS[0]}-${PORTS[-1]}" \
      "($((SECONDS - began))s)"
  echo "REDIS_URL=redis+cluster://$HOST:$base"
}

stop_pid() {  # PID PORT: SIGTERM, then SIGKILL after STOP_GRACE seconds
  local pid=$1 port=$2 waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while node_pid "$port" >/dev/null && ((waited < STOP_GRACE * 10)); do
    sleep 0.1; waited=$((waited + 1))
  done
  if node_pid "$port" >/dev/null; then
    say "node $port ignored SIGTERM for ${STOP_GRACE}s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in {1..100}; do node_pid "$port" >/dev/null || break; sleep 0.05; done
  fi
}

stop_nodes() {  # stops every running node of DIR in parallel; sets STOPPED to their number
  local pidfile port pid
  STOPPED=0
  for pidfile in "$DIR"/node-*.pid; do
    [[ -e $pidfile ]] || continue
    port=${pidfile##*/node-}; port=${port%.pid}
    pid=$(node_pid "$port") || continue
    stop_pid "$pid" "$port" &
    STOPPED=$((STOPPED + 1))
  done
  wait
}

cmd_stop() {
  (($# == 1)) || usage
  [[ -d $1 ]] || { say "nothing to stop: no directory $1"; return 0; }
  DIR=$(cd "$1" && pwd)
  stop_nodes
  remove_files
  rmdir "$DIR" 2>/dev/null || true
  say "stopped $STOPPED node(s) of $DIR"
}

node_line() {  # PORT -> "PORT ROLE SLOTS up|down", and "master=PORT" for a replica
  local port=$1 myself slots
  if ! node_up "$port"; then printf '%s - - down\n' "$port"; return 0; fi
  if [[ $(field "$port" info replication role) == slave ]]; then
    printf '%s replica - up master=%s\n' "$port" "$(field "$port" info replication master_port)"
    return 0
  fi
  myself=$(cli_raw "$port" cluster nodes | grep 'myself' || true)
  slots=$(awk '{ s = ""; for (i = 9; i <= NF; i++) s = s (s ? "," : "") $i; print s }' <<<"$myself")
  printf '%s master %s up\n' "$port" "${slots:--}"
}

cmd_status() {
  (($# == 1)) || usage
  DIR=$(cd "$1" 2>/dev/null && pwd) || die "no directory $1"
  load_state || die "no cluster was started in $DIR"
  local port down=0
  for port in "${PORTS[@]}"; do
    node_line "$port"
    node_up "$port" || down=1
  done
  return "$down"
}

cmd_restart_node() {
  (($# == 2)) || usage
  DIR=$(cd "$1" 2>/dev/null && pwd) || die "no directory $1"
  local port=$2
  load_state || die "no cluster was started in $DIR"
  [[ -f $DIR/nodes-$port.conf ]] || die "port $port is not a node of $DIR"
  node_up "$port" && { say "node $port is already running"; return 0; }
  listening "$port" && die "port $port is already in use by another process"
  rm -f "$DIR/dump-$port.rdb"  # no persistence: it rejoins empty and syncs from its master
  start_node "$port"
  wait_node "$port"
  say "node $port restarted"
}

install_redis() {  # Debian's redis-server package brings redis-cli too
  local sudo=""
  [[ $(id -u) != 0 ]] && command -v sudo >/dev/null && sudo=sudo
  command -v apt-get >/dev/null || return 1
  say "installing redis-server with apt-get ..."
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server
}

if ! command -v "$REDIS_SERVER" >/dev/null; then
  [[ ${INSTALL_MISSING:-0} == 1 ]] && install_redis >&2 || true
  command -v "$REDIS_SERVER" >/dev/null ||
    die "$REDIS_SERVER not found; install it (Debian/Ubuntu: apt-get install redis-server)"
fi
(($# >= 1)) || usage
case $1 in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  status) shift; cmd_status "$@" ;;
  restart-node) shift; cmd_restart_node "$@" ;;
  *) usage ;;
esac
