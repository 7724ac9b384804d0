#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on 127.0.0.1 for the tests: start them if they are
# installed but stopped, install them with apt if missing (Debian/Ubuntu), else fail clearly.
set -u
PG_HOST=127.0.0.1; PG_PORT=5432; REDIS_PORT=6379
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"

pg_up()    { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = "PONG" ]; }

apt_install() {
  command -v apt-get >/dev/null || return 1
  echo "installing $* with apt-get ..."
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"
}

if ! pg_up; then
  command -v pg_ctlcluster >/dev/null || apt_install postgresql postgresql-client
  if command -v pg_ctlcluster >/dev/null; then
    version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
    [ -n "$version" ] && $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null
    for _ in $(seq 20); do pg_up && break; sleep 0.5; done
  fi
fi
if ! redis_up; then
  command -v redis-server >/dev/null || apt_install redis-server
  if command -v redis-server >/dev/null; then
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no >/dev/null
    for _ in $(seq 20); do redis_up && break; sleep 0.5; done
  fi
fi

ok=0
pg_up || { echo "ERROR: PostgreSQL is not answering on $PG_HOST:$PG_PORT (trust auth for user postgres is expected; set JLSE_TEST_PG to use another server)"; ok=1; }
redis_up || { echo "ERROR: Redis is not answering on 127.0.0.1:$REDIS_PORT"; ok=1; }
[ $ok -eq 0 ] && echo "services: PostgreSQL and Redis are up"
exit $ok
