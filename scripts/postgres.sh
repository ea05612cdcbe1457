# Sourced: start a throwaway PostgreSQL cluster (Debian's packages) and export its URL for the tests. Its folder
# is private (mktemp -d: mode 700, then the postgres user's), it listens on 127.0.0.1 only, and every connection
# needs the password made here for this cluster alone (scram-sha-256; the URL carries it): another account on
# the machine is not a superuser of it.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
PG_DIR=$(mktemp -d /tmp/scalewatch-pg.XXXXXX)
PG_PORT=${PG_PORT:-55432}
PG_PASSWORD=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
chown postgres "$PG_DIR"
# the password reaches initdb through a pipe and a file of the postgres user's own in the private folder
printf '%s\n' "$PG_PASSWORD" | su postgres -s /bin/sh -c "umask 077; cat >$PG_DIR/pwfile &&
  $PG_BIN/initdb -D $PG_DIR/data -A scram-sha-256 --pwfile=$PG_DIR/pwfile -U postgres; rc=\$?; rm -f $PG_DIR/pwfile; exit \$rc" >/dev/null
su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/log -w -o '-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1' start" >/dev/null
PGPASSWORD=$PG_PASSWORD "$PG_BIN/createdb" -w -h 127.0.0.1 -p "$PG_PORT" -U postgres scalewatch
export SCALEWATCH_TEST_PG_URL="postgresql+psycopg://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/scalewatch"
_stop_pg() { su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D $PG_DIR/data -m fast stop" >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; }
trap _stop_pg EXIT
