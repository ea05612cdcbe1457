"""Benchmark section 14: `bench project` from the 1-rank ceilings against 1, 2 and 4 ranks run for real over
two namespace hosts with a `tc`-limited link and a blkio-throttled store (tests/infra/projection_check.py)."""

from __future__ import annotations

import statistics
import sys

from runner import ROOT, Context, main_for

NUMBER = 14
TITLE = "projection"


def projection_check(ctx: Context) -> None:
    sys.path.insert(0, str(ROOT))  # the namespace hosts and limits the tests use
    from tests.infra.projection_check import FULL, LINK, SCALES, STORE_IMG_S, TOLERANCE, check_projection
    from tests.infra.ssh_hosts import SshHosts

    hosts = SshHosts(ctx.tmp / "proj-ssh", prefix="swbp").start()
    try:
        runs = [check_projection(ctx.tmp / f"proj-{i}", hosts, FULL) for i in range(ctx.repeats)]
    finally:
        hosts.stop()
    for n in SCALES:
        mine = [run.at(n) for run in runs]
        errors = [c.error for c in mine]
        within = sum(abs(e) <= TOLERANCE for e in errors)
        ctx.add(
            "14 projection",
            f"ssd, {n} rank(s): projected / measured images/s - 1 (bound by {mine[0].bound_by})",
            f"{statistics.median(errors):+.3f}",
            f"target within +-{TOLERANCE:.0%}: {within} of {len(errors)}; errors "
            + ", ".join(f"{e:+.3f}" for e in errors)
            + f"; measured {statistics.median(c.measured_img_s for c in mine):.2f} img/s, projected "
            f"{statistics.median(c.projected_img_s for c in mine):.2f} (store {STORE_IMG_S:g} img/s, link {LINK})"
            + _allreduce(mine),
        )


def _allreduce(checked: list) -> str:
    """The link's part alone where the link is crossed: the model's allreduce against the run's own probe."""
    pairs = [(c.projected_allreduce_s, c.measured_allreduce_s) for c in checked if c.allreduce_error is not None]
    if not pairs or checked[0].bound_by != "communication":
        return ""
    return "; allreduce projected / the run's probe (s): " + ", ".join(f"{p:.1f} / {m:.1f}" for p, m in pairs)


def run(ctx: Context) -> None:
    projection_check(ctx)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
