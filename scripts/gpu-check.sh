#!/usr/bin/env bash
# The GPU path checked on one GPU machine with a CUDA PyTorch image and no network, in one command.
#
#   scripts/gpu-check.sh --prepare   on a networked machine: fetch the wheels such an image lacks into
#                                    .gpucheck-wheels/ (cp312, manylinux x86_64, <= 64 MiB together),
#                                    exactly those pinned in scripts/gpu-check-requirements.txt, hash-checked
#   scripts/gpu-check.sh             on the GPU machine: install those wheels (pip --no-index
#                                    --require-hashes --target, from the requirements file: a wheel whose
#                                    bytes differ from its pinned hash is refused, nothing else in the folder
#                                    is installed), then run at 1 rank on DDP/NCCL, per workload: 6
#                                    interleaved pairs per precision (bf16, fp16) of `bench train --synthetic`
#                                    and the plain tuned-torch loop (benchmarks/tuned_reference.py), each
#                                    pair's ratio and their 95% interval; runs on generated data (torch
#                                    loader; DALI where it imports); the GPU slot plan. Writes
#                                    $OUT/gpu-check.json (after every workload's pairs too: a check cut short
#                                    keeps what it measured), $OUT/gpu-check.md and $OUT/accelerators.yaml
#                                    (seconds per batch per workload and precision: docs/schemas.md). About
#                                    5-6 min per workload on one H200: run one workload per command where a
#                                    command is limited to 10 min (GPUCHECK_WORKLOADS=ssd, then deeplabv3plus)
#   scripts/gpu-check.sh --dry-run   the same steps on a CPU machine with the tiny preset, 2 pairs, bf16
#                                    (< 3 min): fp16 is checked to be refused there instead of run
#   scripts/gpu-check.sh --lock      refresh the pins: on a networked machine, resolve PACKAGES (and their
#                                    dependencies) for cp312 manylinux x86_64 as --prepare fetches them and
#                                    rewrite scripts/gpu-check-requirements.txt with each wheel's version and
#                                    sha256; review the diff, commit it, then run --prepare again
#
# OUT defaults to a new temporary folder; GPUCHECK_WHEELS moves the wheel folder; GPUCHECK_WORKLOADS
# (default "ssd deeplabv3plus") and GPUCHECK_PAIRS (default 6; 2 in a dry run) choose what the check runs.
# Exit 0 when every run that should run ran and every workload and precision has its pairs.
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
from datetime import UTC, datetime
from pathlib import Path

mode, out, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ROOT = Path(os.environ["PYTHONPATH"].split(":")[0])
started = time.monotonic()
BUDGET_S = 7 * 60 if mode == "run" else 150  # optional runs are skipped past this, and say so

import torch  # noqa: E402

from bench.gpucheck import accelerator_profile, pair_ratio  # noqa: E402

gpu = torch.cuda.is_available()
if mode == "run" and not gpu:
    sys.exit("gpu-check: torch sees no CUDA GPU here; use --dry-run on a CPU machine")
SIZES = {  # (preset, image size, batch, dataset images, image sides) as GPU-FINDINGS.md measured
    "ssd": ("production", 300, 64, 768, (320, 480)) if gpu else ("tiny", 64, 8, 48, (96, 128)),
    "deeplabv3plus": ("production", 512, 16, 256, (512, 640)) if gpu else ("tiny", 64, 8, 48, (96, 128)),
}
WORKLOADS = os.environ.get("GPUCHECK_WORKLOADS", " ".join(SIZES)).split()
if not WORKLOADS or set(WORKLOADS) - set(SIZES):
    sys.exit(f"gpu-check: GPUCHECK_WORKLOADS={os.environ.get('GPUCHECK_WORKLOADS')!r}: allowed {', '.join(SIZES)}")
PAIRS = int(os.environ.get("GPUCHECK_PAIRS", "6" if mode == "run" else "2"))
MEASURE_S = 6.0 if gpu else 0.0  # runs on generated data
PAIR_MEASURE_S = 4.0 if gpu else 0.0  # each side of a pair: 24 pairs must fit the machine's time
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


def last_line(done: subprocess.CompletedProcess) -> str:
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def train(workload: str, precision: str, loader: str, data: Path | None, measure_s: float = MEASURE_S) -> dict:
    preset, size, batch, _, _ = SIZES[workload]
    m = work / f"m-{workload}-{precision}-{loader}-{int(time.monotonic() * 1000)}"
    args = ["bench", "train", "--workload", workload, "--preset", preset, "--image-size", str(size)]
    args += ["--batch-size", str(batch), "--precision", precision, "--metrics-out", str(m), *backend_args]
    args += ["--steps", "20" if gpu else "4", "--warmup-steps", "5" if gpu else "1", "--sample-interval", "0.25"]
    if measure_s:
        args += ["--min-measure-s", str(measure_s)]
    if data is None:
        args.append("--synthetic")
    else:
        args += ["--data", str(data), "--loader", loader, "--loader-threads", str(threads), "--no-drop-caches"]
    t0 = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    run = {"workload": workload, "precision": precision, "backend": None, "loader": loader, "synthetic": data is None}
    run |= {"pair": None, "seconds": round(time.monotonic() - t0, 1)}
    if done.returncode != 0:
        return {**run, "images_per_s": None, "gpu_util": None, "gpu_busy_share": None, "data_wait_share": None,
                "error": last_line(done)}
    s = json.loads((m / "summary.json").read_text())
    waits = [r["breakdown"]["data_wait_share"] for r in s["per_rank"]]
    return {
        **run,
        "backend": s.get("backend", "horovod"),
        "images_per_s": s["images_per_s"],
        "gpu_util": s["utilisation"]["gpu_util"],
        "gpu_busy_share": s["utilisation"].get("gpu_busy_share"),
        "gpu_busy_note": s["utilisation"].get("gpu_busy_note"),
        "data_wait_share": statistics.fmean(waits),
        "scaler_skipped_steps": s.get("scaler_skipped_steps"),
        "loss_last": s["loss_last"],
    }


def reference(workload: str, precision: str) -> float | None:
    """The plain tuned torch loop's images/s (benchmarks/tuned_reference.py); None, with a note, if it failed."""
    preset, size, batch, _, _ = SIZES[workload]
    cmd = [sys.executable, str(ROOT / "benchmarks" / "tuned_reference.py"), "--workload", workload]
    cmd += ["--preset", preset, "--image-size", str(size), "--batch-size", str(batch), "--precision", precision]
    cmd += ["--seconds", str(PAIR_MEASURE_S or 2.0), "--warmup", "5" if gpu else "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        notes.append(f"{workload} {precision}: the plain tuned loop failed: {last_line(done)}")
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1])["images_per_s"])


def over_budget(what: str) -> bool:
    if time.monotonic() - started > BUDGET_S:
        notes.append(f"skipped {what}: past the {BUDGET_S:.0f} s budget")
        return True
    return False


def run_pairs(workload: str) -> None:
    """PAIRS interleaved pairs per precision: harness, plain loop, then the other way round in the next
    pair (A B, B A, ...), so a drift of the machine over the pairs weighs on both sides alike."""
    for i in range(PAIRS):
        for precision in PRECISIONS:
            key = (workload, precision)
            if i % 2 == 0:
                h, r = train(workload, precision, "torch", None, PAIR_MEASURE_S), reference(workload, precision)
            else:
                r, h = reference(workload, precision), train(workload, precision, "torch", None, PAIR_MEASURE_S)
            runs.append({**h, "pair": i})
            refs.setdefault(key, []).append(r)
            if h["images_per_s"] and r:
                ratios.setdefault(key, []).append(h["images_per_s"] / r)
        write_outputs(complete=False)  # a check cut short keeps the pairs it measured


def pairs_doc() -> list[dict]:
    """The contract's `pairs`: one entry per workload and precision with at least one complete pair."""
    out = []
    for (workload, precision), values in ratios.items():
        rates = [r["images_per_s"] for r in runs if r["pair"] is not None and r["images_per_s"]
                 and (r["workload"], r["precision"]) == (workload, precision)]
        plain = [r for r in refs[(workload, precision)] if r]
        medians = {"harness_images_per_s": statistics.median(rates), "reference_images_per_s": statistics.median(plain)}
        out.append({"workload": workload, "precision": precision, **pair_ratio(values), **medians})
    return out


def profile_entries() -> list[dict]:
    """Seconds per batch per workload and precision, from the pairs' synthetic runs (data wait excluded)."""
    entries = []
    for pair in pairs_doc():
        preset, size, batch, _, _ = SIZES[pair["workload"]]
        busy = [r["gpu_busy_share"] for r in runs if r["pair"] is not None and r["gpu_busy_share"] is not None
                and (r["workload"], r["precision"]) == (pair["workload"], pair["precision"])]
        entries.append({
            "workload": pair["workload"], "precision": pair["precision"], "preset": preset, "image_size": size,
            "batch_size": batch, "seconds_per_batch": batch / pair["harness_images_per_s"],
            "seconds_per_batch_tuned": batch / pair["reference_images_per_s"],
            "gpu_busy_share": statistics.median(busy) if busy else None, "runs": pair["n"],
        })
    return entries


def driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML (a CPU node, or the wheel missing): the profile says null
        return None
    return version.decode() if isinstance(version, bytes) else version


def write_profile() -> Path:
    header = {
        "accelerator": device,
        "driver": driver() if gpu else None,
        "source": f"scripts/gpu-check.sh on {device}",
        "measured_at": datetime.now(UTC).date().isoformat(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "backend": "ddp" if backend_args else "horovod",
        "ranks": 1,
        "data": "synthetic",
        "dry_run": mode != "run",
    }
    path = out / "accelerators.yaml"
    path.write_text(accelerator_profile(header, profile_entries()))
    return path


def reference_rates() -> dict[str, float]:
    """The plain tuned loop's bf16 images/s per workload: the median over its pairs."""
    out = {}
    for (workload, precision), rates in refs.items():
        rates = [r for r in rates if r]
        if precision == "bf16" and rates:
            out[workload] = statistics.median(rates)
    return out


def table_head(*names: str) -> list[str]:
    return ["| " + " | ".join(names) + " |", "|" + " --- |" * len(names)]


def cell(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v) if isinstance(v, float) else str(v)


def write_outputs(complete: bool) -> dict:
    doc = {
        "device": device,
        "mode": mode,
        "complete": complete,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "runs": runs,
        "reference": reference_rates(),
        "pairs": pairs_doc(),
        "accelerator_profile": str(write_profile()),
        "slot_plan": slot_plan,
        "notes": notes,
        "seconds": round(time.monotonic() - started, 1),
    }
    tmp = out / ".gpu-check.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, out / "gpu-check.json")
    lines = [f"# gpu-check: {device}, torch {torch.__version__}" + ("" if complete else " (incomplete)") + "\n"]
    lines += table_head("workload", "precision", "backend", "loader", "synthetic", "pair", "images/s", "NVML GPU %",
                        "GPU busy", "data wait")
    for r in runs:
        error = f" {r['error']}" if r.get("error") else ""
        lines.append(
            f"| {r['workload']} | {r['precision']} | {cell(r['backend'])} | {r['loader']} | {r['synthetic']} | "
            f"{cell(r['pair'])} | {cell(r['images_per_s'], '{:.0f}')} | {cell(r['gpu_util'], '{:.0f}')} | "
            f"{cell(r['gpu_busy_share'])} | {cell(r['data_wait_share'])} |{error}"
        )
    lines += ["", *table_head("workload", "precision", "harness / plain tuned loop", "95% interval", "pairs",
                              "harness images/s", "plain images/s")]
    lines += [f"| {p['workload']} | {p['precision']} | {p['ratio']:.3f} | "
              f"[{cell(p['ci_low'], '{:.3f}')}, {cell(p['ci_high'], '{:.3f}')}] | {p['n']} | "
              f"{p['harness_images_per_s']:.0f} | {p['reference_images_per_s']:.0f} |" for p in doc["pairs"]]
    lines += ["", "Ratio: geometric mean of the per-pair ratios; interval: Student's t on their mean log (95%).",
              "", f"slot plan: {json.dumps(slot_plan)}", "", *[f"- {n}" for n in notes]]
    (out / "gpu-check.md").write_text("\n".join(lines) + "\n")
    return doc


from bench.train.slots import gpu_numa_cpus, plan_slot  # noqa: E402

gpus = gpu_numa_cpus()
slot = plan_slot(socket.gethostname(), 0, 1, len(os.sched_getaffinity(0)), False, gpus=gpus)
slot_plan = {
    "gpus_seen_by_nvml": [{"index": i, "numa_node": node, "cpus": len(cpus)} for i, (node, cpus) in enumerate(gpus)],
    "rank0": {"gpu": slot.gpu, "numa_node": slot.numa_node, "cpus": list(slot.cpus), "bound_by": slot.bound_by},
}
device = torch.cuda.get_device_name(0) if gpu else "cpu (dry run)"
runs: list[dict] = []
refs: dict[tuple[str, str], list[float | None]] = {}
ratios: dict[tuple[str, str], list[float]] = {}
for workload in WORKLOADS:
    preset, size, batch, images, sides = SIZES[workload]
    run_pairs(workload)
    kind = "coco" if workload == "ssd" else "segmentation"
    data = work / kind
    gen = ["bench", "dataset", "generate", "--kind", kind, "--out", str(data), "--images", str(images)]
    subprocess.run([*gen, "--min-side", str(sides[0]), "--max-side", str(sides[1])], check=True,
                   capture_output=True, timeout=300)
    for precision in PRECISIONS:
        if precision == "bf16" or not over_budget(f"{workload}: {precision} on generated data"):
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
    write_outputs(complete=False)

short = [f"{w} {p}: {len(ratios.get((w, p), []))} of {PAIRS} pairs" for w in WORKLOADS for p in PRECISIONS
         if len(ratios.get((w, p), [])) < PAIRS]
notes += [f"incomplete pairs: {s}" for s in short]
doc = write_outputs(complete=True)
print((out / "gpu-check.md").read_text())
print(f"gpu-check: wrote {out / 'gpu-check.json'} and {doc['accelerator_profile']} in {doc['seconds']} s")
failed = [r for r in runs if r["images_per_s"] is None]
sys.exit(1 if failed or short else 0)
PYTHON
