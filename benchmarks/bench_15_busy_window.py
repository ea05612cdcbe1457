"""Benchmark section 15: what the GPU busy window (bench.train.timing.GpuBusyWindow) costs the measured
images/s, as interleaved pairs of `bench train` with the window and without it (SCALEWATCH_BUSY_WINDOW_STEPS=0).

On a GPU the window profiles BUSY_WINDOW_STEPS measured steps under CUPTI: its per-launch cost lands in
those steps; its start-up, stop and read-out stay outside the step times. On a CPU node no profiler runs
(the figure is null, "no GPU") and both sides of a pair would run the same code: there the section times
the CPU path's only cost, the window's per-step checks, against a measured step (as section 9 does for
the step timer), and leaves the A/B row to a GPU. Two A/B runs on this 2-core box under load gave 0.956
[0.854, 1.070] and 0.880 [0.708, 1.093] for identical code: noise, not overhead.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from runner import Context, describe, main_for, paired, train

NUMBER = 15
TITLE = "busy window"


def _args(gpu: bool) -> list[str]:
    """SSD as the GPU check runs it on a GPU (production preset, batch 64, 300 px, DDP); tiny on one core."""
    if gpu:
        size = ["--preset", "production", "--image-size", "300", "--batch-size", "64", "--backend", "ddp"]
    else:
        size = ["--preset", "tiny", "--image-size", "128", "--batch-size", "8", "--loader-threads", "1"]
    run = ["--steps", "30", "--warmup-steps", "5", "--min-measure-s", "8"]
    return ["--workload", "ssd", "--synthetic", "--precision", "bf16", *size, *run]


def window_overhead(add) -> None:
    """On a GPU: images/s with the window over images/s without it, interleaved (A/B/A/B). On a CPU node
    the two sides run the same code (no profiler starts there), so pairs would measure only the
    machine's noise: the CPU path's cost is the window's per-step checks, timed against a measured step."""
    import torch

    from bench.train.timing import BUSY_WINDOW_ENV, BUSY_WINDOW_STEPS

    figure = f"ssd: images/s with the {BUSY_WINDOW_STEPS}-step GPU busy window / without"
    if not torch.cuda.is_available():
        pin = str(max(os.sched_getaffinity(0)))
        bookkeeping(add, statistics.median(train(_args(False), pin=pin)["per_rank"][0]["step_times_s"]))
        add("15 busy window", figure, "not run", "needs a GPU: on a CPU node no profiler runs ('no GPU')")
        return
    shares: list[float] = []

    def with_window() -> float:
        summary = train(_args(True))
        if summary["utilisation"]["gpu_busy_share"] is not None:
            shares.append(summary["utilisation"]["gpu_busy_share"])
        return summary["images_per_s"]

    p = paired(with_window, lambda: train(_args(True), prefix=f"export {BUSY_WINDOW_ENV}=0")["images_per_s"])
    busy = f"median gpu_busy_share {statistics.median(shares):.3f}" if shares else "no gpu_busy_share figure"
    add("15 busy window", figure, f"{p['ratio']:.3f}", f"{describe(p, 'target >= 0.99')}; {busy}")


def bookkeeping(add, step_s: float) -> None:
    """What a CPU rank pays for the window: its begin/end checks on every step, against the median step
    of a measured run (resolvable where A/B pairs are swamped by the machine's noise)."""
    import torch

    from bench.train.timing import GpuBusyWindow, busy_window

    window, n = GpuBusyWindow(torch.device("cpu"), busy_window(5, 200_000)), 200_000
    t0 = time.perf_counter()
    for step in range(n):
        window.begin(step)
        window.end(step, 0.1)
    per_step = (time.perf_counter() - t0) / n
    add(
        "15 busy window",
        "images/s kept with the busy window's per-step checks (CPU path: 1 - their cost / median step)",
        f"{1 - per_step / step_s:.6f}",
        f"target >= 0.99; {per_step * 1e6:.2f} us per step vs a {step_s * 1e3:.0f} ms step (ssd tiny, 1 core)",
    )


def run(ctx: Context) -> None:
    window_overhead(ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
