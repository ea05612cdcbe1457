# Sourced by scripts/airflow-ui.sh: Airflow's metadata database on a local PostgreSQL (Debian's packages),
# kept between starts in AIRFLOW_PG_DIR (one cluster per checkout), listening on loopback only. Its own
# database (`airflow`): a results store on the same server would get a database of its own, never this one.
# Exports AIRFLOW__DATABASE__SQL_ALCHEMY_CONN(_ASYNC); `_start_airflow_pg` starts the server (creating it and
# the database the first time), `_stop_airflow_pg` stops it, keeping its data.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
AIRFLOW_PG_DIR=${AIRFLOW_PG_DIR:-/var/tmp/scalewatch-airflow-pg-$(printf %s "$ROOT" | md5sum | cut -c1-8)}
AIRFLOW_PG_PORT=${AIRFLOW_PG_PORT:-55433}
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg://postgres@127.0.0.1:$AIRFLOW_PG_PORT/airflow"
# Airflow would derive postgresql+asyncpg, which is not installed: psycopg 3 serves the async engine too
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC="postgresql+psycopg_async://postgres@127.0.0.1:$AIRFLOW_PG_PORT/airflow"

_as_pg() { # root hands the server to the postgres user (initdb refuses root); anyone else runs it as self
  if [[ $(id -u) == 0 ]]; then su postgres -s /bin/sh -c "$1"; else sh -c "$1"; fi
}

_start_airflow_pg() {
  if [[ -z "$PG_BIN" ]]; then
    echo "airflow-pg: PostgreSQL is not installed (apt-get install postgresql)" >&2
    return 1
  fi
  if [[ ! -f "$AIRFLOW_PG_DIR/data/PG_VERSION" ]]; then
    mkdir -p "$AIRFLOW_PG_DIR"
    if [[ $(id -u) == 0 ]]; then chown postgres "$AIRFLOW_PG_DIR"; fi
    # trust on loopback only (listen_addresses below): a local UI's server, not a deployment's (docs/deploy.md)
    _as_pg "$PG_BIN/initdb -D $AIRFLOW_PG_DIR/data -A trust -U postgres" >/dev/null
  fi
  if ! _as_pg "$PG_BIN/pg_ctl -D $AIRFLOW_PG_DIR/data status" >/dev/null 2>&1; then
    _as_pg "$PG_BIN/pg_ctl -D $AIRFLOW_PG_DIR/data -l $AIRFLOW_PG_DIR/log -w -o '-p $AIRFLOW_PG_PORT -k $AIRFLOW_PG_DIR -c listen_addresses=127.0.0.1' start" >/dev/null
  fi
  if ! _as_pg "$PG_BIN/psql -h 127.0.0.1 -p $AIRFLOW_PG_PORT -U postgres -tAc \"SELECT 1 FROM pg_database WHERE datname = 'airflow'\"" | grep -q 1; then
    _as_pg "$PG_BIN/createdb -h 127.0.0.1 -p $AIRFLOW_PG_PORT -U postgres airflow"
  fi
}

_stop_airflow_pg() {
  if [[ -f "$AIRFLOW_PG_DIR/data/PG_VERSION" ]]; then
    _as_pg "$PG_BIN/pg_ctl -D $AIRFLOW_PG_DIR/data -m fast stop" >/dev/null 2>&1 || true
  fi
}
