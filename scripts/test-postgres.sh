#!/usr/bin/env bash
# Starts (or reuses) Debian's PostgreSQL 15 on loopback for `make test` and
# prints its superuser URL. It runs as the postgres user from a data folder
# of its own, so it never touches the machine's default cluster.
#   scripts/test-postgres.sh start   -> prints the URL
#   scripts/test-postgres.sh stop
set -euo pipefail

# Below the kernel's ephemeral range (32768-60999 here) and below the
# ports internal/testport hands out (20000 up): a port in the ephemeral range
# can be held in TIME_WAIT by any earlier outgoing connection, and then
# PostgreSQL cannot bind it.
port=${CODER_TEST_POSTGRES_PORT:-15432}
dir=${CODER_TEST_POSTGRES_DIR:-/tmp/coder-test-postgres}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
as_pg() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case ${1:-start} in
start)
  if ! as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    if [[ ! -f $dir/data/PG_VERSION ]]; then
      rm -rf "$dir"
      mkdir -p "$dir"
      [[ $(id -u) -eq 0 ]] && chown postgres:postgres "$dir"
      as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
      -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c fsync=off -c max_connections=300" start >/dev/null
  fi
  # A server already running keeps the port it was started with (line 4 of
  # postmaster.pid).
  running=$(sed -n 4p "$dir/data/postmaster.pid" 2>/dev/null || true)
  echo "postgres://postgres@127.0.0.1:${running:-$port}/postgres?sslmode=disable"
  ;;
stop)
  as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  ;;
*)
  echo "usage: $0 start|stop" >&2
  exit 2
  ;;
esac
