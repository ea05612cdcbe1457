#!/usr/bin/env bash
# README command 2: set up on a fresh machine and run every test (real Slurm, sshd, PostgreSQL,
# Airflow, Chromium and Horovod ranks are started by the tests or here).
#
# With no arguments, the whole suite in two phases (issue 42: within 35 minutes on a 2-core box):
#   1. two lanes at once: the Airflow lane, tests/airflow (a running Airflow: mostly waiting on its
#      scheduler and triggerer) and tests/dags (dag.test() runs), beside every other test not marked `rates`
#      (the lanes were balanced on measured times: 11 + 5.5 min against 20 min before tests/dags moved);
#   2. the tests marked `rates` (they judge a measured rate, a throttle, a cause read from timings), alone,
#      so that nothing of this suite runs beside them.
# The suite was ~24% CPU-busy run as one process (user+sys 23 of 95 core-minutes): the lanes fill the
# waits, and the measured tests keep the quiet machine they were written for.
# With arguments, one plain pytest run with them (`scripts/test.sh -m "not slow"`, a file, `-k ...`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --with-test-services
source scripts/env.sh
source scripts/postgres.sh # a real PostgreSQL for the store tests; stopped on exit
ruff check bench plugins dags tests scripts benchmarks
ruff format --check bench plugins dags tests scripts benchmarks

PYTEST=(python -m pytest -q -p no:cacheprovider)
if (($#)); then
  "${PYTEST[@]}" "$@"
  exit
fi

lanes=$(mktemp -d -t scalewatch-lanes.XXXXXX)
trap '_stop_pg; rm -rf "$lanes"' EXIT
started=$SECONDS
AIRFLOW_LANE=(tests/airflow tests/dags)
echo "phase 1: ${AIRFLOW_LANE[*]} beside the other tests not marked rates (its output follows when both end)"
"${PYTEST[@]}" -m "not rates" "${AIRFLOW_LANE[@]}" >"$lanes/airflow.log" 2>&1 &
airflow_lane=$!
rc_rest=0
"${PYTEST[@]}" -m "not rates" "${AIRFLOW_LANE[@]/#/--ignore=}" || rc_rest=$?
rc_airflow=0
wait "$airflow_lane" || rc_airflow=$?
echo "---- lane ${AIRFLOW_LANE[*]} (exit $rc_airflow) ----"
cat "$lanes/airflow.log"
echo "phase 1 took $((SECONDS - started)) s"
started=$SECONDS
echo "phase 2: the tests marked rates, alone"
rc_rates=0
"${PYTEST[@]}" -m rates || rc_rates=$?
echo "phase 2 took $((SECONDS - started)) s; exits: other $rc_rest, airflow $rc_airflow, rates $rc_rates"
# every phase must have run: pytest's 5 (nothing collected) fails the suite as any failure does
source scripts/phases.sh
phases_exit other="$rc_rest" airflow="$rc_airflow" rates="$rc_rates"
