"""Benchmark section 7: the GPU table (figures from scripts/gpu-check.sh on a lent GPU machine)."""

from __future__ import annotations

import sys

from runner import (
    Context,
    main_for,
)

NUMBER = 7
TITLE = "GPU"


def run(ctx: Context) -> None:
    ctx.add(
        "7 GPU",
        "GPU table, SSD300 R50 img/s per GPU vs NVIDIA (663 img/s A100)",
        "not run",
        "no GPU lent to this task",
    )


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
