#!/usr/bin/env bash
# A DEFAULT-configured PostgreSQL 15 cluster for benchmarks: start | stop | url | status.
#
# Benchmark figures are ones users plan with, so this cluster keeps Postgres's durability
# settings at their defaults (fsync, synchronous_commit and full_page_writes all on) — unlike
# the test suite's throwaway cluster (scripts/postgres.sh), which turns them off for speed.
# The only settings added: shared_preload_libraries=pg_stat_statements (the benches count
# statements per run with it) and max_connections=200 (two servers' pools plus the bench).
#
# Data under /tmp/tracon-benchpg (override with TRACON_BENCHPG_DIR), loopback only, a fixed
# port (TRACON_BENCHPG_PORT, default 55432). Every command is idempotent: `start` on a running
# cluster only prints its URL, `stop` on a stopped one does nothing.
#
#   scripts/bench-postgres.sh start
#   DATABASE_URL=$(scripts/bench-postgres.sh url) target/release/bench-postgres --statements
#   scripts/bench-postgres.sh stop
set -euo pipefail

BIN=${TRACON_BENCHPG_BIN:-/usr/lib/postgresql/15/bin}
DIR=${TRACON_BENCHPG_DIR:-/tmp/tracon-benchpg}
PORT=${TRACON_BENCHPG_PORT:-55432}
URL="postgres://postgres@127.0.0.1:$PORT/postgres"

# Postgres will not run as root: run its tools as the postgres user when we are root.
as=()
if [ "$(id -u)" -eq 0 ]; then
  as=(runuser -u postgres --)
fi

running() {
  [ -f "$DIR/data/postmaster.pid" ] && "${as[@]}" "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1
}

start() {
  [ -x "$BIN/pg_ctl" ] || { echo "no PostgreSQL 15 at $BIN (apt-get install postgresql-15)" >&2; exit 1; }
  if running; then
    echo "$URL"
    return 0
  fi
  mkdir -p "$DIR"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$DIR"
  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    # initdb's own flush is left on too (no --no-sync): the cluster is what a user would run.
    "${as[@]}" "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  "${as[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_stat_statements -c max_connections=200" \
    start >/dev/null || { cat "$DIR/log" >&2; exit 1; }
  "${as[@]}" "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qAtc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' postgres >/dev/null
  echo "$URL"
}

stop() {
  if running; then
    "${as[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
  fi
}

status() {
  if running; then
    echo "running: $URL"
    "${as[@]}" "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qAtc \
      "SELECT name || '=' || setting FROM pg_settings WHERE name IN ('fsync','synchronous_commit','full_page_writes','shared_preload_libraries','max_connections','shared_buffers') ORDER BY name" postgres
  else
    echo "stopped"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) echo "$URL" ;;
  status) status ;;
  *) echo "usage: $0 start|stop|url|status" >&2; exit 2 ;;
esac
