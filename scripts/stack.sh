#!/usr/bin/env bash
# The container stack (docker/compose.yaml): PostgreSQL, Airflow's api-server, scheduler, dag-processor
# and triggerer, and two CPU compute nodes the suite docker/suites/nodes.yaml trains on over ssh.
#
#   SCALEWATCH_ADMIN_PASSWORD=... scripts/stack.sh up   build from this checkout, start, return once every
#                                                        service is healthy; prints the UI's URL
#   scripts/stack.sh down                                stop and remove the containers; volumes kept
#   scripts/stack.sh build                               build the images (cached layers), start nothing
#
# Docker (with `docker compose`) where a Docker engine answers, else podman with podman-compose. With
# podman, CONTAINERS_CONF defaults to docker/podman-containers.conf (runc, cgroupfs, no default
# ulimits: what these hosts need). Where no image registry answers, the official bases are replaced by
# images built from Debian packages: debootstrap -> `podman import` -> docker/local-bases.Dockerfile.
# pip inside a podman build gets this machine's pip settings (`pip config list`: indexes, find-links,
# constraints, CA bundle) as a mounted /etc/pip.conf, with the local folders they name mounted
# read-only: nothing of them stays in an image. The secrets (POSTGRES_PASSWORD, the superuser's; AIRFLOW_DB_PASSWORD,
# Airflow's metadata role's; SCALEWATCH_RESULTS_PASSWORD, the results role's; AIRFLOW_JWT_SECRET; AIRFLOW_SECRET_KEY)
# are made at the first start into docker/.env (mode 600 from its creation) unless set; docker/postgres-roles.sh
# gives the roles theirs at every start. The nodes' network is internal (no way out, no route to PostgreSQL or the
# API server): with podman that needs netavark (docker/podman-containers.conf), whose DNS serves internal networks.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
COMPOSE_FILE=docker/compose.yaml
PROJECT=scalewatch
UI_URL=http://localhost:8080
TIMEOUT=${SCALEWATCH_STACK_TIMEOUT:-1200}
# Build logs, pip settings and debootstrap's root file system: a folder of the user's own, never a fixed
# name in a world-writable /var/tmp, where another account could plant it as a link first (this script
# runs as root where podman does, removes the rootfs folder and writes its logs there).
STATE=${SCALEWATCH_STACK_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/scalewatch-stack}
SERVICES=(postgres api-server scheduler dag-processor triggerer node1 node2)

die() {
  echo "stack.sh: $*" >&2
  exit 1
}

# --- the command and its input, checked before anything starts -------------------------------------
case "${1:-}" in
up)
  [ -n "${SCALEWATCH_ADMIN_PASSWORD:-}" ] || die "SCALEWATCH_ADMIN_PASSWORD: required (the admin's password, 8 characters or more)"
  [ ${#SCALEWATCH_ADMIN_PASSWORD} -ge 8 ] || die "SCALEWATCH_ADMIN_PASSWORD: 8 characters or more (got ${#SCALEWATCH_ADMIN_PASSWORD})"
  ;;
down | build) ;;
*) die "usage: scripts/stack.sh up|down|build (got '${1:-}')" ;;
esac

# --- engine ------------------------------------------------------------------------------------------
if docker info >/dev/null 2>&1; then
  ENGINE=docker
  COMPOSE=(docker compose -f "$COMPOSE_FILE" -p "$PROJECT")
elif command -v podman >/dev/null 2>&1; then
  ENGINE=podman
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/docker/podman-containers.conf}
  command -v podman-compose >/dev/null 2>&1 || die "podman is here but podman-compose is not (apt install podman-compose)"
  backend=$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null || true)
  [ "$backend" = netavark ] || die "podman's network backend is '${backend:-unknown}', not netavark: the nodes' internal" \
    "network needs its DNS (apt install netavark aardvark-dns; CONTAINERS_CONF: docker/podman-containers.conf)"
  COMPOSE=(podman-compose -f "$COMPOSE_FILE" -p "$PROJECT")
else
  die "neither a Docker engine (docker info) nor podman answers on this machine"
fi

# --- secrets -----------------------------------------------------------------------------------------
SECRET_KEYS=(POSTGRES_PASSWORD AIRFLOW_DB_PASSWORD SCALEWATCH_RESULTS_PASSWORD AIRFLOW_JWT_SECRET AIRFLOW_SECRET_KEY)
secrets() {
  local env_file=docker/.env
  local line key
  (
    umask 077
    touch "$env_file"
    chmod 600 "$env_file" # umask does not change a file made before
    for key in "${SECRET_KEYS[@]}"; do
      grep -q "^$key=" "$env_file" || printf '%s=%s\n' "$key" "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" >>"$env_file"
    done
  )
  while IFS= read -r line; do
    key=${line%%=*}
    case " ${SECRET_KEYS[*]} " in
    *" $key "*) [ -n "${!key:-}" ] || export "${line?}" ;;
    esac
  done <"$env_file"
}

# --- images ------------------------------------------------------------------------------------------
AIRFLOW_IMAGE=${SCALEWATCH_AIRFLOW_IMAGE:-scalewatch-airflow}
TRAINING_IMAGE=${SCALEWATCH_TRAINING_IMAGE:-scalewatch-train-cpu}
LOCAL_DEBIAN=localhost/scalewatch-debian:bookworm
LOCAL_AIRFLOW_BASE=localhost/scalewatch-airflow-base:3.3.2-python3.11
LOCAL_POSTGRES=localhost/scalewatch-postgres:15

have_image() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }

# The official image, else (no registry answers) the local stand-in, built when missing.
pullable() {
  local name=$1
  [[ ${name%%/*} == *.* ]] || { [[ $name == */* ]] && name=docker.io/$name || name=docker.io/library/$name; }
  have_image "$1" || have_image "$name" || timeout 120 "$ENGINE" pull -q "$name" >/dev/null 2>&1
}

local_debian() {
  have_image "$LOCAL_DEBIAN" && return
  command -v debootstrap >/dev/null || die "no registry answers and debootstrap is missing (apt install debootstrap)"
  local rootfs="$STATE/rootfs"
  rm -rf "$rootfs"
  echo "stack.sh: making $LOCAL_DEBIAN with debootstrap" >&2
  nice -n 15 debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" \
    http://deb.debian.org/debian >"$STATE/debootstrap.log" 2>&1 || die "debootstrap failed: $STATE/debootstrap.log"
  tar -C "$rootfs" -c . | podman import - "$LOCAL_DEBIAN" >/dev/null
  rm -rf "$rootfs"
}

# pip's settings of this machine as build mounts (podman): /etc/pip.conf plus the local paths it names.
PIP_MOUNTS=()
pip_mounts() {
  PIP_MOUNTS=()
  [ "$ENGINE" = podman ] || return 0
  local conf="$STATE/pip.conf" line key value path
  declare -A seen=()
  echo "[global]" >"$conf"
  while IFS= read -r line; do
    key=${line#*.}
    key=${key%%=*}
    value=${line#*=}
    value=${value#\'}
    value=${value%\'}
    [ -n "${seen[$key]:-}" ] && continue
    seen[$key]=1
    printf '%s = %s\n' "$key" "$value" >>"$conf"
    for path in $value; do
      path=${path#file://}
      path=${path%/simple} # a local index's pages link to files beside its simple/ folder
      if [[ $path == /* ]] && [ -e "$path" ]; then PIP_MOUNTS+=(--volume "$path:$path:ro"); fi
    done
  done < <(python3 -m pip config list 2>/dev/null | grep -E "^[^=]+\.[a-z-]+=" || true)
  PIP_MOUNTS+=(--volume "$conf:/etc/pip.conf:ro")
}

build() {
  local args=()
  [ "$ENGINE" = docker ] && { "${COMPOSE[@]}" build; return; }
  pip_mounts
  if ! pullable postgres:16; then
    export SCALEWATCH_POSTGRES_IMAGE=${SCALEWATCH_POSTGRES_IMAGE:-$LOCAL_POSTGRES}
    if ! have_image "$SCALEWATCH_POSTGRES_IMAGE"; then
      local_debian
      nice -n 15 podman build -q -f docker/local-bases.Dockerfile --target postgres -t "$LOCAL_POSTGRES" . >/dev/null
    fi
  fi
  # The stack's own images are built at every up, from this checkout: a cached layer costs nothing, and an
  # image kept because it exists would run the code of whichever checkout built it first.
  local airflow_base=${AIRFLOW_BASE:-apache/airflow:3.3.2-python3.11}
  if ! pullable "$airflow_base"; then
    airflow_base=$LOCAL_AIRFLOW_BASE
    if ! have_image "$airflow_base"; then
      local_debian
      nice -n 15 podman build -q -f docker/local-bases.Dockerfile --target airflow-base -t "$airflow_base" . >/dev/null
    fi
  fi
  echo "stack.sh: building $AIRFLOW_IMAGE on $airflow_base" >&2
  nice -n 15 podman build "${PIP_MOUNTS[@]}" -f docker/airflow.Dockerfile --build-arg AIRFLOW_BASE="$airflow_base" \
    -t "$AIRFLOW_IMAGE" . >"$STATE/build-airflow.log" 2>&1 || die "airflow image: see $STATE/build-airflow.log"
  local training_base=${TRAINING_BASE:-debian:bookworm-slim} index=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
  if ! pullable "$training_base"; then
    local_debian
    training_base=$LOCAL_DEBIAN
    index=${TORCH_INDEX-}  # the local find-links holds the CPU wheel (the pip settings above)
  fi
  echo "stack.sh: building $TRAINING_IMAGE on $training_base" >&2
  # the same build arguments as docker/compose.yaml's x-node
  args=(--build-arg BASE="$training_base" --build-arg SYSTEM_PACKAGES=python3.11-venv --build-arg TORCH=torch==2.13.0+cpu
    --build-arg TORCH_INDEX="$index" --build-arg "EXCLUDE=^(apache-airflow|torch|nvidia-dali)" --build-arg HOROVOD=0)
  nice -n 15 podman build "${PIP_MOUNTS[@]}" -f docker/training.Dockerfile "${args[@]}" -t "$TRAINING_IMAGE" . \
    >"$STATE/build-training.log" 2>&1 || die "training image: see $STATE/build-training.log"
}

# --- health ------------------------------------------------------------------------------------------
container_of() { podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -1; }

# podman 4.3 schedules healthchecks with systemd timers, which this kind of host lacks: run them here.
healthy() {
  local name
  name=$(container_of "$1")
  [ -n "$name" ] && podman healthcheck run "$name" >/dev/null 2>&1
}

wait_healthy() {  # each service checked until it answers once (its check can cost a CLI start)
  local deadline=$((SECONDS + TIMEOUT)) pending=("$@") left service
  while :; do
    left=()
    for service in "${pending[@]}"; do healthy "$service" || left+=("$service"); done
    [ ${#left[@]} -eq 0 ] && return 0
    pending=("${left[@]}")
    [ $SECONDS -lt $deadline ] || die "not healthy after ${TIMEOUT}s: ${pending[*]} (podman logs <container>)"
    sleep 5
  done
}

wait_exit() {  # a one-shot service: its exit status
  local name
  name=$(container_of "$1")
  [ -n "$name" ] || die "$1: no container"
  local code
  code=$(podman wait "$name")
  [ "$code" = 0 ] || { podman logs --tail 20 "$name" >&2; die "$1 failed (exit $code)"; }
}

up() {
  export SCALEWATCH_ADMIN_PASSWORD
  secrets
  build
  local start=$SECONDS
  if [ "$ENGINE" = docker ]; then
    "${COMPOSE[@]}" up -d --wait --wait-timeout "$TIMEOUT"
  else
    # podman-compose 1.0.3 (Debian 12) starts services without waiting on depends_on conditions: the
    # order of docker/compose.yaml's conditions, kept here; containers left from an earlier start are
    # removed first (it would not reuse them), the volumes kept.
    "${COMPOSE[@]}" down >"$STATE/up.log" 2>&1 || die "up: see $STATE/up.log"
    "${COMPOSE[@]}" up -d --no-deps postgres keys >>"$STATE/up.log" 2>&1 || die "up: see $STATE/up.log"
    wait_exit keys
    wait_healthy postgres
    "${COMPOSE[@]}" up -d --no-deps postgres-roles >>"$STATE/up.log" 2>&1 || die "up: see $STATE/up.log"
    wait_exit postgres-roles
    "${COMPOSE[@]}" up -d --no-deps airflow-init >>"$STATE/up.log" 2>&1 || die "up: see $STATE/up.log"
    wait_exit airflow-init
    "${COMPOSE[@]}" up -d --no-deps api-server scheduler dag-processor triggerer node1 node2 >>"$STATE/up.log" 2>&1 ||
      die "up: see $STATE/up.log"
    wait_healthy "${SERVICES[@]}"
  fi
  echo "stack.sh: every service healthy after $((SECONDS - start))s"
  echo "UI: $UI_URL  (user admin; password: \$SCALEWATCH_ADMIN_PASSWORD)"
}

down() {
  export SCALEWATCH_ADMIN_PASSWORD=${SCALEWATCH_ADMIN_PASSWORD:-not-used-by-down}
  secrets
  "${COMPOSE[@]}" down >"$STATE/down.log" 2>&1 || die "down: see $STATE/down.log"
  echo "stack.sh: stopped; volumes kept"
}

mkdir -p -m 700 "$STATE"
[ -d "$STATE" ] && [ ! -L "$STATE" ] && [ -O "$STATE" ] || die "$STATE: not a folder of this user's own"
case "${1:-}" in
up) up ;;
down) down ;;
build)
  export SCALEWATCH_ADMIN_PASSWORD=${SCALEWATCH_ADMIN_PASSWORD:-not-used-by-build}
  secrets
  build
  ;;
esac
