# Sourced: start a throwaway PostgreSQL cluster (Debian's packages) and export its URL for the tests.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
PG_DIR=$(mktemp -d /tmp/scalewatch-pg.XXXXXX)
PG_PORT=${PG_PORT:-55432}
chown postgres "$PG_DIR"
su postgres -s /bin/sh -c "$PG_BIN/initdb -D $PG_DIR/data -A trust -U postgres" >/dev/null
su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/log -w -o '-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1' start" >/dev/null
su postgres -s /bin/sh -c "$PG_BIN/createdb -h 127.0.0.1 -p $PG_PORT -U postgres scalewatch"
export SCALEWATCH_TEST_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/scalewatch"
_stop_pg() { su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D $PG_DIR/data -m fast stop" >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; }
trap _stop_pg EXIT
