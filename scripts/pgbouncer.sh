#!/usr/bin/env bash
# A pgbouncer of one worker machine: its processes' PostgreSQL sessions share POOL_SIZE server
# connections per database in transaction pooling mode (docs/distributed.md, "Connection
# pooling"). Listens on 127.0.0.1 only (LISTEN_ADDR to change it); the workers' DATABASE_URL
# then names 127.0.0.1:PORT.
#
#   scripts/pgbouncer.sh start DIR PORT [POOL_SIZE] [UPSTREAM_HOST] [UPSTREAM_PORT]
#   scripts/pgbouncer.sh stop DIR
#
# DIR holds pgbouncer.ini, the user list, the log and the pid file; run as root, the script
# starts pgbouncer as PGBOUNCER_RUN_AS (nobody), who must be able to reach DIR. PGBOUNCER_USERS (default
# "postgres jlse") are the user names accepted; with PGPASSWORD set, clients log in with it
# (SCRAM) and pgbouncer logs in to PostgreSQL with it; without, both trust.
# INSTALL_MISSING=1 (make pgbouncer-up): install pgbouncer with apt if it is missing.
set -euo pipefail

PGBOUNCER=${PGBOUNCER:-$(command -v pgbouncer || echo /usr/sbin/pgbouncer)}
LISTEN_ADDR=${LISTEN_ADDR:-127.0.0.1}
UP_TIMEOUT=${UP_TIMEOUT:-15}  # seconds for pgbouncer to listen
# A worker asks for idle_in_transaction_session_timeout in its connection's "options"
# (crawl_registry.worker_store_url), which pgbouncer does not pass on: its server connections
# set it instead (the same value), and "options" is ignored. A store whose URL names a schema
# in "options" notices that it was ignored and refuses to open (a crawl behind pgbouncer gets
# a database of its own).
IDLE_TIMEOUT_MS=${IDLE_TIMEOUT_MS:-5000}

die() { echo "pgbouncer.sh: $*" >&2; exit 1; }
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

listening() {  # PORT -> whether LISTEN_ADDR:PORT accepts connections
  (exec 3<>"/dev/tcp/$LISTEN_ADDR/$1") 2>/dev/null
}

cmd_start() {
  (($# >= 2)) || usage
  local dir=$1 port=$2 pool=${3:-2} host=${4:-127.0.0.1} upstream=${5:-5432} auth user
  [[ $port =~ ^[0-9]+$ && $pool =~ ^[0-9]+$ ]] || die "PORT and POOL_SIZE are numbers"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [[ -f $dir/pgbouncer.pid ]] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; then
    die "already running in $dir (pid $(cat "$dir/pgbouncer.pid"))"
  fi
  listening "$port" && die "port $port is taken"
  auth=trust
  [[ -n ${PGPASSWORD:-} ]] && auth=scram-sha-256
  : > "$dir/userlist.txt"
  for user in ${PGBOUNCER_USERS:-postgres jlse}; do
    printf '"%s" "%s"\n' "$user" "${PGPASSWORD:-}" >> "$dir/userlist.txt"
  done
  chmod 600 "$dir/userlist.txt"
  # Transaction pooling: a server connection serves one transaction of a client, then the
  # next client's. The crawl store keeps no session state across transactions (see the docs).
  cat > "$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$upstream connect_query='SET idle_in_transaction_session_timeout = $IDLE_TIMEOUT_MS'

[pgbouncer]
listen_addr = $LISTEN_ADDR
listen_port = $port
unix_socket_dir =
auth_type = $auth
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = $pool
max_db_connections = $pool
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 2000
server_reset_query =
server_idle_timeout = 60
ignore_startup_parameters = extra_float_digits, options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  local as=()
  if [[ $(id -u) == 0 ]]; then  # pgbouncer does not run as root
    user=${PGBOUNCER_RUN_AS:-nobody}
    chown -R "$user" "$dir"
    as=(-u "$user")
  fi
  "$PGBOUNCER" -d "${as[@]}" "$dir/pgbouncer.ini" ||
    die "pgbouncer did not start; see $dir/pgbouncer.log"
  local waited=0
  until listening "$port"; do
    ((waited++ < UP_TIMEOUT * 10)) || die "not listening on $LISTEN_ADDR:$port after ${UP_TIMEOUT}s; see $dir/pgbouncer.log"
    sleep 0.1
  done
  echo "pgbouncer: $LISTEN_ADDR:$port -> $host:$upstream, $pool server connections per database (pid $(cat "$dir/pgbouncer.pid"))"
}

cmd_stop() {
  (($# >= 1)) || usage
  local pidfile=$1/pgbouncer.pid pid waited=0
  [[ -f $pidfile ]] || { echo "pgbouncer: not running in $1"; return 0; }
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    ((waited++ < 50)) || { kill -9 "$pid" 2>/dev/null || true; break; }
    sleep 0.1
  done
  rm -f "$pidfile"
  echo "pgbouncer: stopped (pid $pid)"
}

if ! command -v "$PGBOUNCER" >/dev/null; then
  if [[ ${INSTALL_MISSING:-0} == 1 ]]; then
    echo "pgbouncer.sh: installing pgbouncer (apt-get install -y pgbouncer)" >&2
    apt-get install -y pgbouncer >&2 || true
  fi
  command -v "$PGBOUNCER" >/dev/null ||
    die "$PGBOUNCER not found; install it (Debian/Ubuntu: apt-get install pgbouncer, or make pgbouncer-up)"
fi
(($# >= 1)) || usage
case $1 in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  *) usage ;;
esac
