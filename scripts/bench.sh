#!/usr/bin/env bash
# Benchmarks (not tests): prints side-by-side ratios and writes benchmarks/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --with-test-services
source scripts/env.sh
# Section 16 (history load) needs PostgreSQL: a throwaway cluster unless one is named (stopped on exit)
if [ -z "${SCALEWATCH_TEST_PG_URL:-}" ]; then source scripts/postgres.sh; fi
python benchmarks/runner.py "$@" 2> >(grep -v -E "Calculating Metrics" >&2)
