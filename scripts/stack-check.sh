#!/usr/bin/env bash
# The container stack's end-to-end check (scripts/stack_check.py): scripts/stack.sh up (building what is
# missing), a run of scaling_regression__nodes over the REST API to a verdict with both compute nodes
# probed, the history page for the logged-in admin, down and up again keeping that history. Its timings
# (up -> healthy, the first run) go to benchmarks/RESULTS.md, section 20. Heavy: one at a time on a
# shared machine (the lock below), and not in CI (image builds alone pass CI's 35 minutes here:
# docker/README.md). Needs SCALEWATCH_ADMIN_PASSWORD; stops the stack at the end (volumes kept).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || scripts/install.sh
source scripts/env.sh
exec flock "${SCALEWATCH_HEAVY_LOCK:-/tmp/sw-heavy.lock}" python scripts/stack_check.py "$@"
