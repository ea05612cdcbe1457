#!/usr/bin/env bash
# Bring up the Airflow UI (standalone: LocalExecutor, parallelism 4, examples off) with the scalewatch DAGs,
# its metadata on a local PostgreSQL (scripts/airflow-pg.sh: started here, stopped when the UI stops, its
# data kept for the next start in a folder of this user's own; password authentication on 127.0.0.1 only,
# the password in a mode-600 file beside Airflow's). Login: user "admin"; the password is in the file
# printed below.
# `scripts/airflow-ui.sh stop` stops a PostgreSQL a killed UI left running.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if [[ "${1:-}" == "stop" ]]; then
  source scripts/airflow-pg.sh
  _stop_airflow_pg
  echo "stopped Airflow's PostgreSQL (data kept in $AIRFLOW_PG_DIR)"
  exit 0
fi
[[ -n "${SCALEWATCH_SKIP_INSTALL:-}" ]] || scripts/install.sh --with-postgresql  # skip: a machine already set up
mkdir -p "$AIRFLOW_HOME"
source scripts/airflow-pg.sh
_start_airflow_pg
trap _stop_airflow_pg EXIT
echo "UI: http://localhost:${AIRFLOW__API__PORT:-8080}  (user admin; password in $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated)"
echo "Airflow metadata: PostgreSQL on 127.0.0.1:$AIRFLOW_PG_PORT, database airflow (data in $AIRFLOW_PG_DIR;" \
  "user postgres, password in $AIRFLOW_PG_PASSWORD_FILE)"
airflow standalone
