#!/usr/bin/env bash
# Provisions Postgres for the test suite; sourced by scripts/test.
#
# - DATABASE_URL set and reachable: use that server.
# - Otherwise: install PostgreSQL from Debian's packages if it is missing, and start a
#   throwaway cluster on loopback (owned by the postgres user: Postgres will not run as root).
#
# Either way a fresh database is created for this test run and dropped when the run ends;
# tests get it as TRACON_TEST_DATABASE_URL and create one schema each inside it.

pg_bin_dir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}

pg_reachable() {
  psql "$1" -qAtc 'select 1' >/dev/null 2>&1
}

start_throwaway_cluster() {
  local bin port dir
  if ! bin=$(pg_bin_dir); then
    echo "==> installing PostgreSQL (Debian packages)"
    if [ "$(id -u)" -ne 0 ]; then
      echo "PostgreSQL is not installed and this user cannot install it; set DATABASE_URL to a reachable server." >&2
      return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null || {
      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
    } || { echo "could not install PostgreSQL" >&2; return 1; }
    bin=$(pg_bin_dir) || { echo "PostgreSQL binaries not found after installing" >&2; return 1; }
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  dir=$(mktemp -d /tmp/tracon-pg.XXXXXX)
  local as=()
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres:postgres "$dir"
    as=(runuser -u postgres --)
  fi
  "${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 >/dev/null || return 1
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400" start >/dev/null || {
    cat "$dir/log" >&2; return 1; }
  TRACON_PG_STOP=("${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast stop)
  TRACON_PG_DIR=$dir
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
  echo "==> started a throwaway PostgreSQL on 127.0.0.1:$port ($dir)"
}

provision_postgres() {
  if [ -n "${DATABASE_URL:-}" ] && pg_reachable "$DATABASE_URL"; then
    echo "==> using the PostgreSQL server at DATABASE_URL"
  else
    [ -n "${DATABASE_URL:-}" ] && echo "==> DATABASE_URL is set but not reachable; starting a throwaway server instead"
    start_throwaway_cluster || return 1
  fi
  TRACON_TEST_DB="tracon_test_$(date +%s)_$$"
  psql "$DATABASE_URL" -qAtc "CREATE DATABASE $TRACON_TEST_DB" >/dev/null || {
    echo "could not create the test database $TRACON_TEST_DB" >&2; return 1; }
  export TRACON_TEST_DATABASE_URL
  TRACON_TEST_DATABASE_URL=$(python3 - "$DATABASE_URL" "$TRACON_TEST_DB" <<'PY'
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1])
print(u.urlunsplit((p.scheme, p.netloc, "/" + sys.argv[2], p.query, p.fragment)))
PY
)
  echo "==> test database $TRACON_TEST_DB"
}

cleanup_postgres() {
  if [ -n "${TRACON_TEST_DB:-}" ]; then
    psql "$DATABASE_URL" -qAtc "DROP DATABASE IF EXISTS $TRACON_TEST_DB WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  if [ -n "${TRACON_PG_DIR:-}" ]; then
    "${TRACON_PG_STOP[@]}" >/dev/null 2>&1 || true
    rm -rf "$TRACON_PG_DIR"
  fi
}
