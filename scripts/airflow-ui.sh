#!/usr/bin/env bash
# Bring up the Airflow UI (standalone: LocalExecutor on SQLite, parallelism 4, examples off) with
# the scalewatch DAG. Login: user "admin"; the password is printed below once the file exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
source scripts/env.sh
mkdir -p "$AIRFLOW_HOME"
echo "UI: http://localhost:8080  (user admin; password in $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated)"
exec airflow standalone
