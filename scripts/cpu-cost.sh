#!/usr/bin/env bash
# Core-seconds one command costs, every process it starts included (issue 51): the suite's phase 1 is
# CPU-bound on a shared 2-core machine, so wall time says little about what a test costs; the CPU of
# its Airflow, task processes, ranks and Chromium does. The command runs in its own cgroup-v1 cpuacct
# group (children inherit it), and the group's cpuacct.usage is printed when it ends.
#   scripts/cpu-cost.sh NAME COMMAND...   e.g.
#   flock /tmp/sw-heavy.lock scripts/cpu-cost.sh ui python -m pytest -q -p no:cacheprovider tests/airflow/test_ui.py
# With pytest, `-p tests.infra.cpu_cost` adds one line per test.
# Prints "cpu-cost NAME: <core-seconds> core-s, <wall> s wall, exit <rc>" last; exits with the command's exit.
set -euo pipefail
if (($# < 2)); then
  echo "usage: $0 NAME COMMAND..." >&2
  exit 2
fi
name=$1
shift
if [[ ! $name =~ ^[A-Za-z0-9_.-]+$ ]]; then
  echo "$0: NAME must be letters, digits, '_', '.' or '-' (got '$name')" >&2
  exit 2
fi
group=/sys/fs/cgroup/cpuacct/sw-$name-$$
mkdir "$group"
trap 'rmdir "$group" 2>/dev/null || true' EXIT
started=$(date +%s.%N)
rc=0
# a wrapper shell joins the group, then becomes the command: everything it starts is counted
# (SW_CPU_GROUP: tests/infra/cpu_cost.py, `-p tests.infra.cpu_cost`, charges each test its own share)
SW_CPU_GROUP=$group bash -c 'echo $$ >"$1/tasks"; shift; exec "$@"' cpu-cost "$group" "$@" || rc=$?
ended=$(date +%s.%N)
# processes left behind (a daemon the command did not stop) are still counted until now
usage=$(cat "$group/cpuacct.usage")
left=$(wc -l <"$group/tasks")
if ((left > 0)); then
  echo "cpu-cost $name: $left process(es) still in the group; moving them out" >&2
  while read -r pid; do echo "$pid" >/sys/fs/cgroup/cpuacct/tasks 2>/dev/null || true; done <"$group/tasks"
fi
awk -v n="$name" -v u="$usage" -v s="$started" -v e="$ended" -v rc="$rc" \
  'BEGIN { printf "cpu-cost %s: %.1f core-s, %.1f s wall, exit %d\n", n, u / 1e9, e - s, rc }'
exit "$rc"
