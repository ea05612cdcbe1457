"""Benchmark section 2: feed efficiency, training images/s with real data / with --synthetic."""

from __future__ import annotations

import sys

from runner import (
    KIND,
    Context,
    main_for,
    median,
    train,
)

NUMBER = 2
TITLE = "feed"


COMMON = ["--batch-size", "8", "--image-size", "128", "--steps", "20", "--warmup-steps", "3"]


def run(ctx: Context) -> None:
    for w in KIND:
        real = median(
            lambda w=w: train(["--workload", w, "--data", str(ctx.data[w]), *COMMON])["images_per_s"], ctx.repeats
        )
        syn = median(lambda w=w: train(["--workload", w, "--synthetic", *COMMON])["images_per_s"], ctx.repeats)
        ctx.add(
            "2 feed",
            f"{w}: real data / --synthetic training images/s",
            f"{real / syn:.3f}",
            f"({real:.0f} vs {syn:.0f} img/s)",
        )


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
