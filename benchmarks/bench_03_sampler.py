"""Benchmark section 3: the metric sampler's cost, images/s with the 4 Hz sampler / without, interleaved."""

from __future__ import annotations

import os
import sys

from runner import (
    KIND,
    Context,
    describe,
    main_for,
    paired,
    train,
)

NUMBER = 3
TITLE = "sampler"


# Pinned to one core like a rank's slot, each run measured for 8 s.
LONG = ["--batch-size", "8", "--image-size", "128", "--steps", "20", "--warmup-steps", "3"]
LONG += ["--min-measure-s", "8", "--loader-threads", "1"]


def run(ctx: Context) -> None:
    pin = str(max(os.sched_getaffinity(0)))
    for w in KIND:
        p = paired(
            lambda w=w: train(["--workload", w, "--synthetic", *LONG, "--sample-interval", "0.25"], pin=pin)[
                "images_per_s"
            ],
            lambda w=w: train(["--workload", w, "--synthetic", *LONG, "--no-sampler"], pin=pin)["images_per_s"],
        )
        ctx.add(
            "3 sampler",
            f"{w}: images/s with 4 Hz sampler / without",
            f"{p['ratio']:.3f}",
            describe(p, "target >= 0.99"),
        )


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
