"""A figure measured beside somebody else's work is not the infrastructure's: interference, judged at every
scale and at every node ceiling, re-measured once, and INCONCLUSIVE when it stays.

Each rank samples the CPU time that processes not of the run spent on its slot's cores
(bench.metrics.sources.interference: the share of the slot's core-seconds, the busiest process by name,
pid and core). A scale or its node ceiling whose ranks lost more than the suite's share (`max_foreign_share`,
else INTERFERENCE_SHARE) is:
1. re-measured once after the last scale (the scale as REMEASURE, its ceiling as REMEASURE_INDEPENDENT),
   as a suspected regression is run again;
2. judged on the re-measure where one ran (`settled`): the later run replaces the first, whatever it shows;
3. INCONCLUSIVE, its reason beginning `interference:` and naming the process on each node, when the
   figure it is judged on (the scale's own, or the ceiling it is judged against) was still measured under
   that share. Never PASSED and never FAILED on such a figure: a busy neighbour pinned beside a rank took
   the ideal down with the scale (the ceiling ran beside it too), so a verdict against it passed a scale
   slower than one rank; and a kernel thread's 15% failed a healthy node.
"""

from __future__ import annotations

import math

from bench.analysis.verdict import bounds
from bench.config.models import Thresholds
from bench.results.schema import INDEPENDENT, REMEASURE, REMEASURE_INDEPENDENT

# The share of a rank's slot cores that foreign work may take before the figure is not the
# infrastructure's, where the suite sets no `max_foreign_share` (also the cause rules' threshold).
INTERFERENCE_SHARE = 0.10
PREFIX = "interference:"
# Which re-measure stands in for which run (variant of the first run -> variant of its re-measure).
REMEASURED_BY = {"": REMEASURE, INDEPENDENT: REMEASURE_INDEPENDENT}


def share_bound(thresholds: Thresholds) -> float:
    """The share above which interference applies: the suite's `max_foreign_share`, else the default."""
    return INTERFERENCE_SHARE if thresholds.max_foreign_share is None else float(thresholds.max_foreign_share)


def _share(rank: dict) -> float:
    value = rank.get("foreign_cpu_share")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0


def noisy_ranks(ranks: list[dict], bound: float) -> list[dict]:
    """The ranks that lost more than `bound` of their slot's cores to foreign work (the FOREIGN_SHARE
    bound's comparison, the one the `max_foreign_share` expectation makes), worst first."""
    return sorted((r for r in ranks if bounds.fails(bounds.FOREIGN_SHARE, _share(r), bound)), key=_share, reverse=True)


def culprits(ranks: list[dict], bound: float) -> str:
    """Who took the cores, one clause per node (its worst rank): '' when no rank reached `bound`."""
    worst: dict[str, dict] = {}
    for r in noisy_ranks(ranks, bound):
        worst.setdefault(str(r.get("host") or "?"), r)
    return "; ".join(
        f"on {host}, {r.get('foreign_top') or 'unnamed processes'} took {_share(r):.0%} of rank {r.get('rank')}'s cores"
        for host, r in worst.items()
    )


def result_ranks(result: dict) -> list[dict]:
    """A run result's per-rank figures (host, rank and the breakdown with the foreign share); [] without a
    completed summary."""
    summary = result.get("summary") if result.get("state") == "COMPLETED" else None
    if not isinstance(summary, dict):
        return []
    return [
        {"host": r.get("host"), "rank": r.get("rank"), **(r.get("breakdown") or {})}
        for r in summary.get("per_rank") or []
        if isinstance(r, dict)
    ]


def interfered(result: dict, bound: float) -> str:
    """The culprits of a completed run measured under interference; '' for a clean (or failed) run."""
    return culprits(result_ranks(result), bound)


def remeasure_plan(runs: list[dict], bound: float) -> list[dict]:
    """One re-measure of each scale and each node ceiling that ran under interference (in run order)."""
    done = {(r["workload"], int(r["gpus"]), r.get("variant", "")) for r in runs}
    plan = []
    for r in runs:
        variant = REMEASURED_BY.get(r.get("variant", ""))
        item = {"workload": r["workload"], "gpus": int(r["gpus"]), "variant": variant}
        if variant and (item["workload"], item["gpus"], variant) not in done and interfered(r["result"], bound):
            plan.append(item)
            done.add((item["workload"], item["gpus"], variant))
    return plan


def settled(runs: list[dict]) -> list[dict]:
    """The runs with each re-measured scale or ceiling replaced by its re-measure (which keeps the first
    run's variant, so the verdict reads it as the scale's own, marked `remeasured`); the re-measures
    themselves dropped."""
    again = {
        (r["workload"], int(r["gpus"]), first): r
        for r in runs
        for first, variant in REMEASURED_BY.items()
        if r.get("variant") == variant
    }
    out = []
    for r in runs:
        if r.get("variant") in REMEASURED_BY.values():
            continue
        later = again.get((r["workload"], int(r["gpus"]), r.get("variant", "")))
        if later is not None:
            r = {**r, "result": {**later["result"], "remeasured": True}}
        out.append(r)
    return out
