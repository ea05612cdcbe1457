"""Benchmark section 9: the step-time breakdown's cost per step."""

from __future__ import annotations

import os
import statistics
import sys
import time

from runner import (
    Context,
    main_for,
    train,
)

NUMBER = 9
TITLE = "timing"


def timing_overhead(add) -> None:
    """The StepTimer's own cost per step (its perf_counter marks and bookkeeping, CPU path) against a
    median embedded-default step: the instrumentation is in every run, so it cannot be A/B'd in situ."""
    import torch

    from bench.train.timing import StepTimer

    timer, n = StepTimer(torch.device("cpu")), 200_000
    t0 = time.perf_counter()
    for _ in range(n):
        timer.start(t0)
        timer.mark("data_wait")
        timer.mark("compute")
        timer.mark("comm")
        timer.finish(time.perf_counter(), True)
    per_step = (time.perf_counter() - t0) / n
    step = statistics.median(
        train(
            [
                "--workload",
                "ssd",
                "--synthetic",
                "--batch-size",
                "8",
                "--image-size",
                "128",
                "--steps",
                "30",
                "--loader-threads",
                "1",
            ],
            pin=str(max(os.sched_getaffinity(0))),
        )["per_rank"][0]["step_times_s"]
    )
    add(
        "9 breakdown",
        "images/s kept with per-step timing (1 - timer cost / median step)",
        f"{1 - per_step / step:.5f}",
        f"target >= 0.99; {per_step * 1e6:.1f} us per step vs a {step * 1e3:.0f} ms step (ssd, 1 core)",
    )


def run(ctx: Context) -> None:
    timing_overhead(ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
