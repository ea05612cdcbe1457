#!/usr/bin/env bash
# README command 1: set up on a fresh machine, run the DAG once end to end on the embedded default
# (CPU, local launcher, small synthetic dataset, SQLite), print the verdict and the report path.
# Optional: a JSON conf as $1, e.g. '{"gpus": [1, 2, 4]}'.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
source scripts/env.sh
mkdir -p "$AIRFLOW_HOME"
airflow db migrate >"$SCALEWATCH_HOME/db-migrate.log" 2>&1 || { cat "$SCALEWATCH_HOME/db-migrate.log"; exit 1; }
python scripts/run_dag_once.py "${1:-{\}}" 2> >(grep -v -E "Calculating Metrics" >&2)
