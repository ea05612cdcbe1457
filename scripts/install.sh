#!/usr/bin/env bash
# Sets up everything scalewatch needs on a fresh Debian 12 machine: apt packages, a venv with the
# pinned stack, Horovod built against torch 2.13 (wheel cached), and the bench package itself.
# Idempotent: a second run only checks. Usage: scripts/install.sh [--with-test-services | --with-postgresql]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SCALEWATCH_VENV:-$PWD/.venv}
WHEELS=${SCALEWATCH_WHEEL_CACHE:-$HOME/.cache/scalewatch/wheels}
HOROVOD_VERSION=0.28.1

# Everything below is skipped, silently, when this exact set of requirements was installed already.
# Otherwise each step prints one line; apt's, pip's and the build's own output go to the log file.
STAMP="$VENV/.scalewatch-install-stamp${1:-}"
want=$(cat "$0" requirements*.txt pyproject.toml | sha256sum | cut -d" " -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && \
   "$VENV/bin/python" -c "import torch, horovod.torch, nvidia.dali, great_expectations, pandas, airflow, bench" 2>/dev/null; then
  exit 0
fi

LOG=${SCALEWATCH_INSTALL_LOG:-$PWD/scalewatch-home/install.log}
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
step() {  # step "what" command...: one line here, everything the command prints into the log
  echo "install: $1"
  shift
  if ! "$@" >>"$LOG" 2>&1; then
    echo "install: failed: $*; the last lines of $LOG:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
}
echo "install: setting up (full log: $LOG)"

apt_pkgs=(cmake g++ procps fio)  # fio: the storage probe the DAG runs after the last scale
if [[ "${1:-}" == "--with-test-services" ]]; then
  apt_pkgs+=(slurm-wlm munge openssh-server postgresql chromium iproute2 util-linux sshfs)  # sshfs: a network mount
  apt_pkgs+=(ceph-mon ceph-osd radosgw ceph-common)  # a real S3 server (Ceph RGW) for the object-store tests
elif [[ "${1:-}" == "--with-postgresql" ]]; then  # scripts/airflow-ui.sh: Airflow's metadata database
  apt_pkgs+=(postgresql)
fi
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  step "apt-get update" apt-get update -q
  step "apt packages ${missing[*]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[[ -x "$VENV/bin/python" ]] || step "virtual environment $VENV" python3 -m venv "$VENV"
PY="$VENV/bin/python"
step "pip, wheel, setuptools" "$PY" -m pip install -q -U pip wheel setuptools
# torch goes first, pinned, so nothing later can resolve a CUDA build.
step "torch 2.13.0 (CPU)" "$PY" -m pip install -q "torch==2.13.0"
step "Airflow, Great Expectations, DALI and the rest (requirements.txt)" \
  "$PY" -m pip install -q -r requirements.txt -r requirements-dev.txt
step "packages installed without their dependencies" "$PY" -m pip install -q --no-deps -r requirements-nodeps.txt

if ! "$PY" -c "import horovod.torch" 2>/dev/null; then
  mkdir -p "$WHEELS"
  wheel=$(ls "$WHEELS"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [[ -z "$wheel" ]]; then
    # torch headers need C++17; horovod hard-codes -std=c++14, so a wrapper appends c++17 last.
    shim=$(mktemp -d)
    printf '#!/bin/sh\nexec g++ "$@" -std=c++17\n' >"$shim/g++17"
    chmod +x "$shim/g++17"
    step "cmake for the Horovod build" "$PY" -m pip install -q cmake
    step "building horovod $HOROVOD_VERSION (4-7 min on 2 cores; cached in $WHEELS)" env CXX="$shim/g++17" \
      HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS=-j2 \
      "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$WHEELS" "horovod==$HOROVOD_VERSION"
    wheel=$(ls "$WHEELS"/horovod-"$HOROVOD_VERSION"-*.whl | head -n1)
  fi
  step "horovod $HOROVOD_VERSION" "$PY" -m pip install -q --no-deps "$wheel"
  step "Horovod's run-time dependencies" "$PY" -m pip install -q cloudpickle psutil pyyaml packaging cffi
fi
step "scalewatch (bench, editable)" "$PY" -m pip install -q --no-deps -e .
"$PY" -c "import torch, horovod.torch, nvidia.dali, great_expectations, pandas, airflow, bench; \
print('install: ok torch', torch.__version__, 'horovod', horovod.__version__)" 2>>"$LOG"
echo "$want" >"$STAMP"
