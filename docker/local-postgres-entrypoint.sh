#!/bin/sh
# The official postgres image's first-start contract, as docker/compose.yaml uses it: make the cluster
# with POSTGRES_USER/POSTGRES_PASSWORD/POSTGRES_DB when the data folder is empty, run the *.sql files
# of /docker-entrypoint-initdb.d once, then run `postgres ARGS` as the postgres user.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
USER_NAME=${POSTGRES_USER:-postgres}
DB_NAME=${POSTGRES_DB:-$USER_NAME}
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec runuser -u postgres -- "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  # UTF8 as the official image makes it (a bare Debian has no locale: SQL_ASCII, whose version() psycopg 3
  # hands SQLAlchemy as bytes: "cannot use a string pattern on a bytes-like object" at the first connect)
  initdb -D "$PGDATA" -U "$USER_NAME" --pwfile="$pwfile" -A scram-sha-256 --auth-local=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  printf '%s\n' "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  printf '%s\n' "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$DB_NAME" != postgres ]; then createdb -U "$USER_NAME" "$DB_NAME"; fi
  for f in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$f" ] && psql -v ON_ERROR_STOP=1 -U "$USER_NAME" -d "$DB_NAME" -q -f "$f"
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
if [ "${1:-}" = postgres ]; then shift; exec postgres -D "$PGDATA" "$@"; fi
exec "$@"
