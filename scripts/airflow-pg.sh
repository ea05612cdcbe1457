# Sourced by scripts/airflow-ui.sh: Airflow's metadata database on a local PostgreSQL (Debian's packages), its
# own database (`airflow`: a results store on the same server would get a database of its own, never this one).
#   - the cluster lives in AIRFLOW_PG_DIR (default $SCALEWATCH_HOME/airflow-pg, one per checkout), a folder of
#     this user's own (of the postgres user's where root runs this: initdb refuses root) with mode 700, kept
#     between starts; its socket is there too. A link, or a folder someone else made, is refused: never a
#     fixed name in a world-writable place that another account could make first.
#   - every connection needs the password (scram-sha-256, TCP and the socket alike; no trust), and the server
#     listens on 127.0.0.1 only. The password is made with the cluster, into AIRFLOW_PG_PASSWORD_FILE (default
#     $AIRFLOW_HOME/postgres-password), created with mode 600 before the secret is written to it.
# `_start_airflow_pg` starts the server (creating it and the database the first time) and exports
# AIRFLOW__DATABASE__SQL_ALCHEMY_CONN(_ASYNC); `_stop_airflow_pg` stops it, keeping its data.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
AIRFLOW_PG_DIR=${AIRFLOW_PG_DIR:-$SCALEWATCH_HOME/airflow-pg}
AIRFLOW_PG_PORT=${AIRFLOW_PG_PORT:-55433}
AIRFLOW_PG_PASSWORD_FILE=${AIRFLOW_PG_PASSWORD_FILE:-$AIRFLOW_HOME/postgres-password}

_as_pg() { # root hands the server to the postgres user (initdb refuses root); anyone else runs it as self
  if [[ $(id -u) == 0 ]]; then su postgres -s /bin/sh -c "$1"; else sh -c "$1"; fi
}

# AIRFLOW_PG_DIR: made 700 if missing; refused unless a plain folder owned by whoever runs the server.
_airflow_pg_folder() {
  local owner
  owner=$(id -un)
  [[ $(id -u) == 0 ]] && owner=postgres
  if [[ ! -e "$AIRFLOW_PG_DIR" && ! -L "$AIRFLOW_PG_DIR" ]]; then
    mkdir -p "$(dirname "$AIRFLOW_PG_DIR")" && mkdir -m 700 "$AIRFLOW_PG_DIR" || return 1
    if [[ $(id -u) == 0 ]]; then chown postgres "$AIRFLOW_PG_DIR"; fi
  fi
  if [[ -L "$AIRFLOW_PG_DIR" || ! -d "$AIRFLOW_PG_DIR" || $(stat -c %U "$AIRFLOW_PG_DIR") != "$owner" ]]; then
    echo "airflow-pg: $AIRFLOW_PG_DIR is not a folder of $owner's own (a link, or made by another account):" \
      "set AIRFLOW_PG_DIR to another place" >&2
    return 1
  fi
  chmod 700 "$AIRFLOW_PG_DIR"
  if ! _as_pg "test -w $(printf %q "$AIRFLOW_PG_DIR")"; then
    echo "airflow-pg: the $owner user cannot reach $AIRFLOW_PG_DIR (a folder above it is closed to it):" \
      "set AIRFLOW_PG_DIR to a place it can reach" >&2
    return 1
  fi
}

# A new password for a new cluster: the file is created 600 (umask) before the secret goes in; never through a
# link or over a file that is there (noclobber opens it O_EXCL).
_airflow_pg_new_password() {
  mkdir -p "$(dirname "$AIRFLOW_PG_PASSWORD_FILE")" || return 1
  rm -f "$AIRFLOW_PG_PASSWORD_FILE"
  (
    umask 077
    set -o noclobber
    od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$AIRFLOW_PG_PASSWORD_FILE"
  )
}

_start_airflow_pg() {
  local data q_data q_dir password exists
  if [[ -z "$PG_BIN" ]]; then
    echo "airflow-pg: PostgreSQL is not installed (apt-get install postgresql)" >&2
    return 1
  fi
  _airflow_pg_folder || return 1
  data=$AIRFLOW_PG_DIR/data
  q_data=$(printf %q "$data")
  q_dir=$(printf %q "$AIRFLOW_PG_DIR")
  if [[ ! -f "$data/PG_VERSION" ]]; then
    _airflow_pg_new_password || return 1
    # the password reaches initdb through a pipe and a file of the server's own in the private folder, removed
    # at once (never an argument: those are public)
    printf '%s\n' "$(<"$AIRFLOW_PG_PASSWORD_FILE")" | _as_pg "umask 077; cat >$q_dir/pwfile &&
      $PG_BIN/initdb -D $q_data -U postgres -A scram-sha-256 --pwfile=$q_dir/pwfile; rc=\$?; rm -f $q_dir/pwfile; exit \$rc" \
      >/dev/null || return 1
  fi
  if [[ ! -s "$AIRFLOW_PG_PASSWORD_FILE" ]]; then
    echo "airflow-pg: $AIRFLOW_PG_DIR holds a cluster whose password is not in $AIRFLOW_PG_PASSWORD_FILE:" \
      "put it back, or remove $AIRFLOW_PG_DIR to start afresh (Airflow's metadata is lost)" >&2
    return 1
  fi
  password=$(<"$AIRFLOW_PG_PASSWORD_FILE")
  if ! _as_pg "$PG_BIN/pg_ctl -D $q_data status" >/dev/null 2>&1; then
    _as_pg "$PG_BIN/pg_ctl -D $q_data -l $q_dir/log -w -o '-p $AIRFLOW_PG_PORT -k $q_dir -c listen_addresses=127.0.0.1' start" >/dev/null ||
      return 1
  fi
  exists=$(PGPASSWORD=$password "$PG_BIN/psql" -X -w -h 127.0.0.1 -p "$AIRFLOW_PG_PORT" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'airflow'") || return 1
  if [[ $exists != 1 ]]; then
    PGPASSWORD=$password "$PG_BIN/createdb" -w -h 127.0.0.1 -p "$AIRFLOW_PG_PORT" -U postgres airflow || return 1
  fi
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg://postgres:$password@127.0.0.1:$AIRFLOW_PG_PORT/airflow"
  # Airflow would derive postgresql+asyncpg, which is not installed: psycopg 3 serves the async engine too
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC="postgresql+psycopg_async://postgres:$password@127.0.0.1:$AIRFLOW_PG_PORT/airflow"
}

_stop_airflow_pg() {
  if [[ -f "$AIRFLOW_PG_DIR/data/PG_VERSION" ]]; then
    _as_pg "$PG_BIN/pg_ctl -D $(printf %q "$AIRFLOW_PG_DIR/data") -m fast stop" >/dev/null 2>&1 || true
  fi
}
