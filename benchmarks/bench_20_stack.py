"""Benchmark section 20: the container stack (issue 50), timed end to end by scripts/stack_check.py: `up` to
every service healthy, the first run of the stack's suite over the REST API, `up` again after `down`.

Heavy (it builds what is missing and runs the whole stack with podman or docker): run it as
`scripts/stack-check.sh` (one at a time on a shared machine). Without SCALEWATCH_ADMIN_PASSWORD it is
skipped and its earlier rows kept.
Usage: python benchmarks/bench_20_stack.py (or `scripts/stack-check.sh`)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from runner import Context, Skipped, main_for

NUMBER = 20
TITLE = "stack"
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def run(ctx: Context) -> None:
    password = os.environ.get("SCALEWATCH_ADMIN_PASSWORD", "")
    if len(password) < 8:
        raise Skipped("SCALEWATCH_ADMIN_PASSWORD (8 characters or more) is not set: scripts/stack-check.sh")
    sys.path.insert(0, str(SCRIPTS))
    from stack_check import DAG, check

    got = check(password)
    ctx.add(
        "20 stack",
        "scripts/stack.sh up, images present: containers started -> every service healthy (s)",
        f"{got['first_healthy']:.0f}",
        f"whole command {got['took_up']:.0f} s incl. any image build",
    )
    ctx.add(
        "20 stack",
        f"first run of {DAG} (2 CPU nodes, ssd tiny, 1 and 2 ranks): trigger -> success (s)",
        f"{got['first_run']:.0f}",
        f"REST API trigger; verdicts {got['verdicts']}; probe read by {got['probe_read_by']}, "
        f"2-node level conclusive: {got['probe_levels_at_2']}",
    )
    ctx.add(
        "20 stack",
        "scripts/stack.sh up after down (volumes kept): started -> every service healthy (s)",
        f"{got['again']:.0f}",
        f"whole command {got['took_again']:.0f} s",
    )


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
