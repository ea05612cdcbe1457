"""Benchmark section 10: the storage knee (tests/infra/knee_check.py, FULL): a blkio throttle at 1.1 x what
one rank reads, `bench sweep` at 1 and 2 ranks under it with the differential reruns; the 2-rank images/s
against what the throttle allows, the projection's knee and the causes named. The slow test
tests/bench/analysis/verdict/test_bottleneck.py runs the same path on a third of the epoch."""

from __future__ import annotations

import statistics
import sys

from runner import ROOT, Context, main_for

NUMBER = 10
TITLE = "storage knee"


def storage_knee(ctx: Context) -> None:
    sys.path.insert(0, str(ROOT))  # the throttle and sweep the tests use
    from tests.infra.knee_check import FULL, Knee, NoKnee, run_knee

    runs, missed = [], []
    for i in range(ctx.repeats):
        try:
            runs.append(run_knee(ctx.tmp / f"knee-{i}", FULL))
        except NoKnee as error:  # a loaded machine: said in the row, not a crash of the whole run
            missed.append(str(error))
    if not runs:
        ctx.add("10 knee", "2-rank images/s under the throttle / what it allows", "n/a", "; ".join(missed))
        return
    twos = [Knee.row(k.knee, 2) for k in runs]
    landed = [two["throughput_img_s"] / k.allowed_img_s for k, two in zip(runs, twos, strict=True)]
    sized = [k.knee["supported_gpus"].dropna() for k in runs]
    projected = [int(s.iloc[0]) if len(s) else None for s in sized]
    ctx.add(
        "10 knee",
        f"2-rank images/s under a blkio throttle of {FULL.throttle_x} x one rank's read rate / what it allows",
        f"{statistics.median(landed):.3f}",
        "target within 0.90-1.10; "
        + ", ".join(f"{x:.3f}" for x in landed)
        + f"; projected supported GPUs {_counted(projected)} (target 1: the knee between 1 and 2); "
        f"2-rank verdict {_counted([t['verdict'] for t in twos])}; "
        f"epoch of {FULL.images} images, free sweeps taken {_counted([k.attempts for k in runs])}"
        + (f"; {len(missed)} repeat(s) without a knee: {'; '.join(missed)}" if missed else ""),
    )
    ctx.add(
        "10 knee",
        "2-rank scale: bottleneck named (target storage) / expected bound (node ceiling model)",
        _counted([_named(t["bottleneck"]) for t in twos]),
        f"expected_bound_by {_counted([t['expected_bound_by'] for t in twos])}; cause check "
        f"{_counted([t['cause_check'] for t in twos])}; unthrottled 2-rank: "
        f"{_counted([_named(Knee.row(k.free, 2)['bottleneck']) for k in runs])}",
    )
    ctx.add(
        "10 knee",
        "2-rank efficiency: throttled / warm-cache rerun (linear ideal); probe ceiling / throttle",
        f"{statistics.median(t['scaling_efficiency'] for t in twos):.3f} / "
        f"{statistics.median(t['warm_efficiency'] for t in twos):.3f}",
        "warm > throttled in "
        f"{sum(t['warm_efficiency'] > t['scaling_efficiency'] for t in twos)} of {len(twos)}; probe / throttle "
        + ", ".join(f"{t['storage_ceiling_mb_s'] / (k.rate / 1e6):.3f}" for k, t in zip(runs, twos, strict=True))
        + "; storage MB/s / throttle "
        + ", ".join(f"{t['avg_read_mb_s'] / (k.rate / 1e6):.3f}" for k, t in zip(runs, twos, strict=True)),
    )


def _named(cause) -> str:
    """A results.csv cause: empty (NaN once read back) is none."""
    return cause if isinstance(cause, str) and cause else "none"


def _counted(values: list) -> str:
    """'storage x3' or 'storage x2, contention x1': each value with how many repeats gave it."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{v} x{n}" for v, n in counts.items())


def run(ctx: Context) -> None:
    storage_knee(ctx)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
