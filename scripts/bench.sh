#!/usr/bin/env bash
# Benchmarks (not tests): prints side-by-side ratios and writes benchmarks/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --with-test-services
source scripts/env.sh
python benchmarks/runner.py "$@" 2> >(grep -v -E "Calculating Metrics" >&2)
