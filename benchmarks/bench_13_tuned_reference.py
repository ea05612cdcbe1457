"""Benchmark section 13: the harness's tuned step against the same model in a plain, tuned torch loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runner import KIND, ROOT, Context, describe, main_for, paired, train

NUMBER = 13
TITLE = "tuned reference"


def tuned_reference(add, pin: str) -> None:
    """`bench train --synthetic` (bf16, the default tuned step) against benchmarks/tuned_reference.py
    (same model, batch, channels_last, bf16, no harness), both on one pinned core, interleaved."""

    def reference(w: str) -> float:
        cmd = ["taskset", "-c", pin, sys.executable, str(ROOT / "benchmarks" / "tuned_reference.py")]
        cmd += ["--workload", w, "--batch-size", "8", "--image-size", "128", "--seconds", "8"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
        return float(json.loads(done.stdout.strip().splitlines()[-1])["images_per_s"])

    args = ["--synthetic", "--precision", "bf16", "--batch-size", "8", "--image-size", "128", "--steps", "20"]
    args += ["--warmup-steps", "5", "--min-measure-s", "8", "--loader-threads", "1"]
    for w in KIND:
        p = paired(lambda w=w: train(["--workload", w, *args], pin=pin)["images_per_s"], lambda w=w: reference(w))
        add(
            "13 tuned",
            f"{w}: harness --synthetic / plain tuned torch loop (bf16, 1 core)",
            f"{p['ratio']:.3f}",
            describe(p, "target >= 0.95"),
        )


def run(ctx: Context) -> None:
    tuned_reference(ctx.add, str(max(os.sched_getaffinity(0))))


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
