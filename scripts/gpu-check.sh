#!/usr/bin/env bash
# The GPU path checked on one GPU machine with a CUDA PyTorch image and no network, in one command.
#
#   scripts/gpu-check.sh --prepare   on a networked machine: fetch the wheels such an image lacks into
#                                    .gpucheck-wheels/ (cp312, manylinux x86_64, <= 64 MiB together),
#                                    exactly those pinned in scripts/gpu-check-requirements.txt, hash-checked
#   scripts/gpu-check.sh             on the GPU machine (<= 8 min on one H200): install those wheels
#                                    (pip --no-index --require-hashes --target, from the requirements file:
#                                    a wheel whose bytes differ from its pinned hash is refused, nothing else
#                                    in the folder is installed), then run at 1 rank on DDP/NCCL both
#                                    workloads synthetic and on generated data (bf16, fp16; torch loader;
#                                    DALI where it imports), the plain tuned-torch reference loop, the
#                                    GPU slot plan; writes $OUT/gpu-check.json and $OUT/gpu-check.md
#   scripts/gpu-check.sh --dry-run   the same steps on a CPU machine with the tiny preset (< 3 min):
#                                    fp16 is checked to be refused there instead of run
#   scripts/gpu-check.sh --lock      refresh the pins: on a networked machine, resolve PACKAGES (and their
#                                    dependencies) for cp312 manylinux x86_64 as --prepare fetches them and
#                                    rewrite scripts/gpu-check-requirements.txt with each wheel's version and
#                                    sha256; review the diff, commit it, then run --prepare again
#
# OUT defaults to a new temporary folder; GPUCHECK_WHEELS moves the wheel folder. Exit 0 when every run
# that should run ran.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WHEELS="${GPUCHECK_WHEELS:-$ROOT/.gpucheck-wheels}"
REQUIREMENTS="$ROOT/scripts/gpu-check-requirements.txt"
MAX_WHEEL_BYTES=$((64 * 1024 * 1024))
# What `bench train` imports that a CUDA torch image lacks (torch, numpy come with it).
PACKAGES=(pydantic pydantic-core annotated-types typing-inspection typing-extensions jsonschema
  jsonschema-specifications referencing rpds-py attrs psutil pillow nvidia-ml-py)
# The GPU image's interpreter and platform: what the wheels are fetched and pinned for.
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)

mode=run
case "${1:-}" in
  --prepare) mode=prepare ;;
  --dry-run) mode=dry ;;
  --lock) mode=lock ;;
  "") ;;
  *) echo "usage: $0 [--prepare | --dry-run | --lock]" >&2; exit 2 ;;
esac

if [[ $mode == lock ]]; then
  fetched="$(mktemp -d -t gpu-check-lock-XXXXXX)"
  trap 'rm -rf "$fetched"' EXIT
  python3 -m pip download --quiet --dest "$fetched" "${TARGET[@]}" "${PACKAGES[@]}"
  {
    echo "# The wheels scripts/gpu-check.sh installs on the GPU machine (cp312, manylinux x86_64): pinned, and"
    echo "# installed with pip --require-hashes, so a wheel swapped into .gpucheck-wheels/ is refused."
    echo "# Written by \`scripts/gpu-check.sh --lock\` (refresh: run it on a networked machine, review, commit)."
    for wheel in "$fetched"/*.whl; do
      IFS=- read -r name version _ <<<"$(basename "$wheel")"
      echo "$name==$version --hash=sha256:$(sha256sum "$wheel" | cut -d' ' -f1)"
    done | sort -f
  } >"$fetched/requirements.txt"
  cp "$fetched/requirements.txt" "$REQUIREMENTS"  # only once every wheel was fetched and hashed
  cat "$REQUIREMENTS"
  exit 0
fi

if [[ $mode == prepare ]]; then
  mkdir -p "$WHEELS"
  python3 -m pip download --quiet --dest "$WHEELS" "${TARGET[@]}" --no-deps --require-hashes -r "$REQUIREMENTS"
  bytes=$(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1)
  if (( bytes > MAX_WHEEL_BYTES )); then
    echo "gpu-check: the wheels in $WHEELS take $bytes bytes, over the 64 MiB that can be copied" >&2
    exit 1
  fi
  ls -1 "$WHEELS"
  echo "gpu-check: $(ls "$WHEELS"/*.whl | wc -l) wheels, $((bytes / 1024 / 1024)) MiB in $WHEELS"
  exit 0
fi

OUT="${OUT:-$(mktemp -d -t gpu-check-XXXXXX)}"
mkdir -p "$OUT"
WORK="$(mktemp -d -t gpu-check-work-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

if [[ $mode == run ]]; then
  PY="${PYTHON:-python3}"
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps --require-hashes \
      --target "$WORK/site" -r "$REQUIREMENTS"
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu-check: no wheels in $WHEELS (run --prepare on a networked machine first); using what is installed" >&2
  fi
  # `bench` as a command, from this checkout, without installing it.
  mkdir -p "$WORK/bin"
  printf '#!/bin/sh\nexec "%s" -m bench "$@"\n' "$(command -v "$PY")" >"$WORK/bin/bench"
  chmod +x "$WORK/bin/bench"
  export PATH="$WORK/bin:$PATH"
else
  source "$ROOT/scripts/env.sh"
  PY=python
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

exec "$PY" - "$mode" "$OUT" "$WORK" <<'PYTHON'
"""The check itself: each run is `bench train` at one rank, as a suite runs it."""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

mode, out, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ROOT = Path(os.environ["PYTHONPATH"].split(":")[0])
started = time.monotonic()
BUDGET_S = 7 * 60 if mode == "run" else 150  # optional runs are skipped past this, and say so

import torch  # noqa: E402

gpu = torch.cuda.is_available()
if mode == "run" and not gpu:
    sys.exit("gpu-check: torch sees no CUDA GPU here; use --dry-run on a CPU machine")
SIZES = {  # (preset, image size, batch, dataset images, image sides) as GPU-FINDINGS.md measured
    "ssd": ("production", 300, 64, 768, (320, 480)) if gpu else ("tiny", 64, 8, 48, (96, 128)),
    "deeplabv3plus": ("production", 512, 16, 256, (512, 640)) if gpu else ("tiny", 64, 8, 48, (96, 128)),
}
MEASURE_S = 6.0 if gpu else 0.0
PRECISIONS = ("bf16", "fp16") if gpu else ("bf16",)
notes: list[str] = []


def bench_help() -> str:
    return subprocess.run(["bench", "train", "--help"], capture_output=True, text=True).stdout


help_text = bench_help()
backend_args = ["--backend", "ddp"] if "--backend" in help_text else []
if not backend_args:
    notes.append("this checkout's `bench train` has no --backend flag: runs used its default backend (Horovod)")
dali = subprocess.run([sys.executable, "-c", "import nvidia.dali"], capture_output=True).returncode == 0
if not dali:
    notes.append("DALI does not import here: DALI runs skipped")
threads = max(1, min(14, (os.cpu_count() or 2) - 2))


def train(workload: str, precision: str, loader: str, data: Path | None) -> dict:
    preset, size, batch, _, _ = SIZES[workload]
    m = work / f"m-{workload}-{precision}-{loader}-{int(time.monotonic() * 1000)}"
    args = ["bench", "train", "--workload", workload, "--preset", preset, "--image-size", str(size)]
    args += ["--batch-size", str(batch), "--precision", precision, "--metrics-out", str(m), *backend_args]
    args += ["--steps", "20" if gpu else "4", "--warmup-steps", "5" if gpu else "1", "--sample-interval", "0.25"]
    if MEASURE_S:
        args += ["--min-measure-s", str(MEASURE_S)]
    if data is None:
        args.append("--synthetic")
    else:
        args += ["--data", str(data), "--loader", loader, "--loader-threads", str(threads), "--no-drop-caches"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    run = {"workload": workload, "precision": precision, "backend": None, "loader": loader, "synthetic": data is None}
    if done.returncode != 0:
        return {**run, "images_per_s": None, "gpu_util": None, "gpu_busy_share": None, "data_wait_share": None,
                "error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]}
    s = json.loads((m / "summary.json").read_text())
    waits = [r["breakdown"]["data_wait_share"] for r in s["per_rank"]]
    return {
        **run,
        "backend": s.get("backend", "horovod"),
        "images_per_s": s["images_per_s"],
        "gpu_util": s["utilisation"]["gpu_util"],
        "gpu_busy_share": s["utilisation"].get("gpu_busy_share"),
        "data_wait_share": statistics.fmean(waits),
        "scaler_skipped_steps": s.get("scaler_skipped_steps"),
        "loss_last": s["loss_last"],
    }


def reference(workload: str) -> float:
    preset, size, batch, _, _ = SIZES[workload]
    cmd = [sys.executable, str(ROOT / "benchmarks" / "tuned_reference.py"), "--workload", workload]
    cmd += ["--preset", preset, "--image-size", str(size), "--batch-size", str(batch)]
    cmd += ["--seconds", str(MEASURE_S or 2.0), "--warmup", "5" if gpu else "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["images_per_s"])


def over_budget(what: str) -> bool:
    if time.monotonic() - started > BUDGET_S:
        notes.append(f"skipped {what}: past the {BUDGET_S:.0f} s budget")
        return True
    return False


device = torch.cuda.get_device_name(0) if gpu else "cpu (dry run)"
runs: list[dict] = []
ref: dict[str, float] = {}
pairs: dict[str, list[float]] = {}
for workload, (preset, size, batch, images, sides) in SIZES.items():
    kind = "coco" if workload == "ssd" else "segmentation"
    data = work / kind
    gen = ["bench", "dataset", "generate", "--kind", kind, "--out", str(data), "--images", str(images)]
    subprocess.run([*gen, "--min-side", str(sides[0]), "--max-side", str(sides[1])], check=True,
                   capture_output=True, timeout=300)
    # The tuned reference and the harness's synthetic bf16 run, interleaved (ref, harness, ref, harness).
    ratios = []
    for i in range(2):
        if i and over_budget(f"{workload}: second reference pair"):
            break
        r = reference(workload)
        h = train(workload, "bf16", "torch", None)
        runs.append(h)
        if h["images_per_s"]:
            ratios.append(h["images_per_s"] / r)
        ref.setdefault(workload, r)
        ref[workload] = max(ref[workload], r)
    pairs[workload] = ratios
    for precision in PRECISIONS:
        if precision != "bf16":
            runs.append(train(workload, precision, "torch", None))
        runs.append(train(workload, precision, "torch", data))
    if dali and not over_budget(f"{workload}: DALI run"):
        runs.append(train(workload, "bf16", "dali", data))
    if not gpu:  # fp16 on a CPU node: refused before the run, naming the field
        refused = train(workload, "fp16", "torch", None)
        ok = refused["images_per_s"] is None and "precision: fp16" in refused.get("error", "")
        notes.append(f"{workload}: fp16 on this CPU node {'refused as it should be' if ok else 'NOT refused'}")
        if not ok:
            runs.append(refused)
    shutil.rmtree(data, ignore_errors=True)

from bench.train.slots import gpu_numa_cpus, plan_slot  # noqa: E402

gpus = gpu_numa_cpus()
slot = plan_slot(socket.gethostname(), 0, 1, len(os.sched_getaffinity(0)), False, gpus=gpus)
slot_plan = {
    "gpus_seen_by_nvml": [{"index": i, "numa_node": node, "cpus": len(cpus)} for i, (node, cpus) in enumerate(gpus)],
    "rank0": {"gpu": slot.gpu, "numa_node": slot.numa_node, "cpus": list(slot.cpus), "bound_by": slot.bound_by},
}
failed = [r for r in runs if r["images_per_s"] is None]
doc = {
    "device": device,
    "mode": mode,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "runs": runs,
    "reference": ref,
    "harness_over_reference": {w: statistics.median(v) if v else None for w, v in pairs.items()},
    "slot_plan": slot_plan,
    "notes": notes,
    "seconds": round(time.monotonic() - started, 1),
}
(out / "gpu-check.json").write_text(json.dumps(doc, indent=2))


def cell(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v) if isinstance(v, float) else str(v)


lines = [f"# gpu-check: {device}, torch {torch.__version__}\n",
         "| workload | precision | backend | loader | synthetic | images/s | NVML GPU % | GPU busy | data wait |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for r in runs:
    lines.append(
        f"| {r['workload']} | {r['precision']} | {cell(r['backend'])} | {r['loader']} | {r['synthetic']} | "
        f"{cell(r['images_per_s'], '{:.0f}')} | {cell(r['gpu_util'], '{:.0f}')} | {cell(r['gpu_busy_share'])} | "
        f"{cell(r['data_wait_share'])} |" + (f" {r['error']}" if r.get("error") else "")
    )
lines += ["", "| workload | plain tuned torch loop images/s | harness / reference (median of pairs) |", "| --- | --- | --- |"]
lines += [f"| {w} | {ref[w]:.0f} | {cell(doc['harness_over_reference'][w], '{:.3f}')} |" for w in ref]
lines += ["", f"slot plan: {json.dumps(slot_plan)}", "", *[f"- {n}" for n in notes]]
(out / "gpu-check.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"gpu-check: wrote {out / 'gpu-check.json'} in {doc['seconds']} s")
sys.exit(1 if failed else 0)
PYTHON
