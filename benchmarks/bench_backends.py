"""torch DDP against Horovod: images/s of the same 2-rank run, started by the suite's local launcher.

Interleaved pairs (DDP, Horovod, DDP, ...), so the machine's drift cancels in each pair's ratio; the
95% interval is a t-interval on the mean log ratio (benchmarks/run.py's `paired`). Synthetic data: the
backends differ only in how the gradients are reduced, so the data path stays out of the ratio.
Usage: python benchmarks/bench_backends.py [--workload ssd] [--pairs-min 6] [--pairs-max 12]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import describe, machine, paired


def two_rank_images_per_s(backend: str, workload: str, measure_s: float, root: Path, runs: list[dict]) -> float:
    """One 2-rank run on `backend` (one core per rank, the suite's slots): its summed images/s."""
    from bench.config import RunSpec, TrainConfig
    from bench.launch.base import collect, wait
    from bench.launch.registry import build_launcher

    train = TrainConfig(
        workload=workload,
        synthetic=True,
        steps=10,
        warmup_steps=3,
        min_measure_s=measure_s,
        batch_size=8,
        backend=backend,
        sampler=False,
    )
    out = Path(tempfile.mkdtemp(prefix=f"bb-{backend}-", dir=root))
    spec = RunSpec(run_id=f"bb-{backend}", train=train, ranks=2, output_dir=out)
    launcher = build_launcher("local")
    handle = launcher.submit(spec)
    state, reason = wait(launcher, handle, 900, 0.5)
    result = collect(handle, state, reason, 2)
    if not result.ok:
        raise RuntimeError(f"{backend}: {result.reason}")
    s = result.summary
    comm = sum(r["breakdown"]["comm_share"] for r in s["per_rank"]) / 2
    runs.append({"backend": s["backend"], "images_per_s": s["images_per_s"], "comm_share": comm})
    return float(s["images_per_s"])


def backends_ratio(workload: str = "ssd", measure_s: float = 8.0, min_pairs: int = 6, max_pairs: int = 12) -> dict:
    """DDP / Horovod images/s at 2 ranks, interleaved, with its 95% interval and each run's figures."""
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
        root = Path(tmp)
        result = paired(
            lambda: two_rank_images_per_s("ddp", workload, measure_s, root, runs),
            lambda: two_rank_images_per_s("horovod", workload, measure_s, root, runs),
            min_pairs=min_pairs,
            max_pairs=max_pairs,
        )
    for name in ("ddp", "horovod"):
        mine = [r for r in runs if r["backend"] == name]
        result[f"{name}_images_per_s"] = [round(r["images_per_s"], 2) for r in mine]
        result[f"{name}_comm_share"] = round(sum(r["comm_share"] for r in mine) / len(mine), 3)
    result["workload"] = workload
    result["resolved"] = bool(result["resolved"])  # numpy's bool: not JSON
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="ssd", choices=("ssd", "deeplabv3plus"))
    p.add_argument("--measure-s", type=float, default=8.0, help="measured seconds per run (warm-up excluded)")
    p.add_argument("--pairs-min", type=int, default=6)
    p.add_argument("--pairs-max", type=int, default=12)
    args = p.parse_args()
    r = backends_ratio(args.workload, args.measure_s, args.pairs_min, args.pairs_max)
    print(f"machine: {machine()}")
    print(
        f"DDP / Horovod images/s, {r['workload']} tiny synthetic, 2 ranks x 1 core, local launcher: "
        f"{r['ratio']:.3f} ({describe(r, 'no target')})"
    )
    print(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
