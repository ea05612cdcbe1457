"""Benchmark section 21: torch DDP against Horovod, images/s of the same 2-rank run, started by the suite's
local launcher.

Interleaved pairs (DDP, Horovod, DDP, ...), so the machine's drift cancels in each pair's ratio; the
95% interval is a t-interval on the mean log ratio (benchmarks/runner.py's `paired`). Synthetic data: the
backends differ only in how the gradients are reduced, so the data path stays out of the ratio.
Usage: python benchmarks/bench_21_backends.py [--repeats N] (or `scripts/bench.sh --only 21`)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import Context, describe, main_for, paired

NUMBER = 21
TITLE = "backends"


def two_rank_images_per_s(backend: str, workload: str, measure_s: float, root: Path, runs: list[dict]) -> float:
    """One 2-rank run on `backend` (one core per rank, the suite's slots): its summed images/s."""
    from bench.config.models import RunSpec, TrainConfig
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


def run(ctx: Context) -> None:
    workload = "ssd"
    r = backends_ratio(workload)
    ddp, horovod = (sorted(r[f"{b}_images_per_s"])[len(r[f"{b}_images_per_s"]) // 2] for b in ("ddp", "horovod"))
    ctx.add(
        "21 backends",
        f"{workload} tiny synthetic, 2 ranks x 1 core, local launcher: DDP / Horovod images/s",
        f"{r['ratio']:.3f}",
        f"{describe(r, 'no target')}; DDP median ~{ddp:.0f}, Horovod ~{horovod:.0f} img/s; exposed communication "
        f"{r['ddp_comm_share']:.3f} vs {r['horovod_comm_share']:.3f}",
    )


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
