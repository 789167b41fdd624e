#!/usr/bin/env bash
# Make sure the servers the test suite talks to are running: Redis on 127.0.0.1:6379 and
# PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`). Idempotent: a running server is
# left alone. The S3 server (SeaweedFS) is started by the test session itself.
set -euo pipefail

REDIS_PORT=${REDIS_PORT:-6379}
PG_PORT=${PG_PORT:-5432}
STATE_DIR=${SERVICES_DIR:-/tmp/agent-checkpoint-services}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 100); do port_open "$1" && return 0; sleep 0.1; done
  echo "services: $2 did not open port $1" >&2
  return 1
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

apt_install() {
  echo "services: installing $* with apt-get" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

start_redis() {
  port_open "$REDIS_PORT" && { echo "services: redis already on :$REDIS_PORT"; return; }
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p "$STATE_DIR/redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$STATE_DIR/redis" --logfile "$STATE_DIR/redis/redis.log"
  wait_port "$REDIS_PORT" redis
  echo "services: started redis on :$REDIS_PORT"
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

start_postgres() {
  if port_open "$PG_PORT"; then
    echo "services: postgres already on :$PG_PORT"
  else
    if [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null && [ "$PG_PORT" = 5432 ]; then
      version=$(ls /etc/postgresql | sort -V | tail -n 1)
      as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    fi
    if ! port_open "$PG_PORT"; then
      [ -n "$(pg_bin)" ] || apt_install postgresql
      bin=$(pg_bin)
      data="$STATE_DIR/pgdata"
      mkdir -p "$STATE_DIR"
      chmod 755 "$STATE_DIR"
      if [ ! -f "$data/PG_VERSION" ]; then
        # initdb refuses to run as root; a fresh cluster is trust-only on loopback here.
        if [ "$(id -u)" = 0 ]; then
          install -d -o postgres -g postgres "$data"
          runuser -u postgres -- "$bin/initdb" -D "$data" --auth=trust -U postgres >/dev/null
        else
          "$bin/initdb" -D "$data" --auth=trust -U postgres >/dev/null
        fi
      fi
      run=(); [ "$(id -u)" = 0 ] && run=(runuser -u postgres --)
      "${run[@]}" "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
        -o "-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
    fi
    wait_port "$PG_PORT" postgres
    echo "services: started postgres on :$PG_PORT"
  fi
  if command -v psql >/dev/null; then
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" \
      | grep -q 1 || psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE test"
  fi
}

start_redis
start_postgres
# the disk store's fsync-ordering test watches a writer's system calls
command -v strace >/dev/null || apt_install strace
