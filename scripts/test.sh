#!/usr/bin/env bash
# README command 2: set up on a fresh machine and run every test (real Slurm, sshd, PostgreSQL,
# Airflow, Chromium and Horovod ranks are started by the tests or here). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --with-test-services
source scripts/env.sh
source scripts/postgres.sh   # a real PostgreSQL for the store tests; stopped on exit
ruff check bench plugins dags tests scripts benchmarks
ruff format --check bench plugins dags tests scripts benchmarks
python -m pytest -q -p no:cacheprovider "$@"
