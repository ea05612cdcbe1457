"""Why a scale dropped: one cause per failing or borderline scale, from documented rules over the
step-time breakdown, compared with the baseline scale, with the figures that decided it.

Rules, in order (the first that holds names the cause):
1. contention: the scale ran oversubscribed (ranks shared cores): its figures are contended by design.
   interference: processes that are not the run's used at least the suite's max_foreign_share (default
   INTERFERENCE_SHARE) of a rank's slot cores while it trained (per-core busy time of foreign threads,
   bench.metrics.sources.interference): named with the process, its pid and the core.
2. straggler: one rank's work rate (images per second of its own time: step time minus its exposed
   communication wait) is more than `straggler_gap` below the ranks' median, and it is slow on its
   own: its compute rate is that far below the others', or only its data wait grew while it has a
   host of its own (a host-local input path; on a shared host uneven waits are the storage's).
   When every rank's data wait grew, the data-wait rule decides instead. Checked
   before the network: a slow rank shows up as communication wait on every other rank.
3. data wait grew (by >= DATA_WAIT_GROWTH of step time over the baseline, or, for an AU failure, is
   at least that large):
   - storage: the epoch-1 read rate sits at >= CEILING_FRACTION of the storage probe's ceiling, or
     the rank's own cores idle while it waits (slot CPU < CPU_SATURATED): the data did not arrive;
   - input CPU: the slot's cores are saturated while it waits (decode and augmentation on too few cores).
4. communication: exposed communication grew by >= COMM_GROWTH of step time on every rank alike.
5. host_bound: the GPU is busy under HOST_BOUND_BUSY of the step (gpu_busy_share, CUDA kernel timeline) with
   no significant data wait (< DATA_WAIT_GROWTH): the host side of the step (Python, kernel launches,
   the optimizer) limits it, not the data and not the GPU. AU reads high there, since AU only says the
   step did not wait for data. A GPU row passing its bounds is named host_bound too (a note, not a
   failure): its per-GPU rate, and so the demand it puts on storage, is below what the GPU can do.
6. contention: compute per step (median over ranks) grew by >= COMPUTE_GROWTH over the baseline on
   equal slots: something shares the cores, caches, memory bandwidth or SMT siblings.
7. undetermined: none of the above holds; the evidence is still given.
"""

from __future__ import annotations

import json
import statistics

import numpy as np
import pandas as pd

# The frame names the straggler (bench.analysis.frame.straggler: straggler_gap, slowest_rank); the rules
# read the same work rate.
from bench.analysis.frame import work_rate
from bench.analysis.verdict import bounds
from bench.analysis.verdict.interference import INTERFERENCE_SHARE

CAUSES = (
    "storage",
    "input_cpu",
    "communication",
    "straggler",
    "host_bound",
    "contention",
    "interference",
    "undetermined",
    "node",  # named by bench.analysis.verdict.nodes, after these rules: one node against its peers
)
DATA_WAIT_GROWTH = 0.10
COMM_GROWTH = 0.10
COMPUTE_GROWTH = 0.20
CEILING_FRACTION = 0.8
CPU_SATURATED = 85.0
HOST_BOUND_BUSY = 0.7


def host_bound(row: dict) -> str | None:
    """The evidence where the row's GPU idles for the host (rule 5), else None; None on CPU rows, whose
    gpu_busy_share is NaN: no GPU, no claim."""
    busy, wait = row.get("gpu_busy_share"), row.get("data_wait_share")
    if busy is None or wait is None or not np.isfinite(busy) or not np.isfinite(wait):
        return None
    if float(busy) >= HOST_BOUND_BUSY or float(wait) >= DATA_WAIT_GROWTH:
        return None
    util = row.get("gpu_util")
    nvml = f", NVML utilisation {float(util):.0f}%" if util is not None and np.isfinite(util) else ""
    return (
        f"GPU busy {_pct(float(busy))} of the step (CUDA kernel timeline){nvml}, data wait {_pct(float(wait))}, "
        f"AU {_pct(float(row.get('au') or 0.0))}: the host side of the step (Python, kernel launches, "
        "the optimizer) limits it"
    )


def _stands_out(ranks: list[dict], base_data_wait: float, threshold: float) -> bool:
    """The slowest rank is slow on its own: its compute rate is more than `threshold` below the others'
    median, or its data wait grew while the others' did not (a host-local input path). A storage that
    starves every rank a little unevenly is not a straggler: the data-wait rule names it."""
    if min(float(r["data_wait_share"]) for r in ranks) - base_data_wait >= DATA_WAIT_GROWTH / 2:
        return False  # every rank waits for data more than at the baseline: an input-side cause
    slow = min(ranks, key=work_rate)
    others = [r for r in ranks if r is not slow] or ranks
    rate = lambda r: float(r["images"]) / max(float(r["compute_s"]), 1e-9)  # noqa: E731
    if bounds.fails(bounds.STRAGGLER_GAP, 1.0 - rate(slow) / statistics.median(rate(r) for r in others), threshold):
        return True
    # A host-local input path needs a host of its own: ranks sharing the slow rank's host share its
    # input path too, and uneven waits among them are the shared storage's (seen on a throttled disk).
    if any(str(r["host"]) == str(slow["host"]) for r in others if r is not slow):
        return False
    others_wait = statistics.median(float(r["data_wait_share"]) for r in others)
    return (
        float(slow["data_wait_share"]) - others_wait >= DATA_WAIT_GROWTH
        and others_wait - base_data_wait < DATA_WAIT_GROWTH / 2
    )


def _ranks(row) -> list[dict]:
    try:
        return json.loads(row.get("rank_breakdown") or "[]")
    except (TypeError, json.JSONDecodeError):
        return []


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def diagnose(
    row: dict,
    base: dict | None,
    straggler_gap: float,
    ceiling_mb_s: float | None,
    au_failed: bool,
    input_side: bool = True,
    foreign_share: float = INTERFERENCE_SHARE,
) -> tuple[str, str]:
    """(cause, evidence) for one failing or borderline row; base is its baseline scale's row.
    `foreign_share`: the share of a rank's cores foreign work may take before it is the cause (the
    suite's max_foreign_share: the same bound that makes a scale inconclusive, bench.analysis.verdict.
    interference.share_bound; a suite that sets 1.0 has said the node's other work is not in question).

    `input_side` False leaves out the data-wait rule: for a drop that warm and synthetic reruns did
    not remove (bench.analysis.verdict.differential), whatever the data wait says."""
    ranks, base_ranks = _ranks(row), _ranks(base or {})
    if not ranks:
        return "undetermined", "no step-time breakdown in this run's summary"
    dw, comm = float(row["data_wait_share"]), float(row["comm_share"])
    b_dw = float(base["data_wait_share"]) if base_ranks else 0.0
    b_comm = float(base["comm_share"]) if base_ranks else 0.0
    at = f" ({_pct(b_dw)} at {int(base['gpus'])})" if base_ranks else ""
    if bool(row.get("oversubscribed")):
        return (
            "contention",
            f"ranks shared cores (oversubscribed); compute {_pct(float(row['compute_share']))} of step time",
        )
    noisy = [r for r in ranks if (r.get("foreign_cpu_share") or 0.0) >= foreign_share]
    if noisy:
        worst = max(noisy, key=lambda r: r["foreign_cpu_share"])
        return "interference", (
            f"foreign processes used {_pct(worst['foreign_cpu_share'])} of rank {worst['rank']}'s cores on "
            f"{worst['host']} while it trained (most: {worst.get('foreign_top') or 'unnamed'}); "
            f"{len(noisy)} of {len(ranks)} rank(s) shared their slot"
        )
    gap = float(row.get("straggler_gap") or 0.0)
    if bounds.fails(bounds.STRAGGLER_GAP, gap, straggler_gap) and _stands_out(ranks, b_dw, straggler_gap):
        slow = min(ranks, key=work_rate)
        return "straggler", (
            f"rank {slow['rank']} on {slow['host']} works {_pct(gap)} below the ranks' median "
            f"(compute {slow['compute_median_s'] * 1e3:.0f} ms/step, data wait {_pct(slow['data_wait_share'])}); "
            f"the others wait for it in communication ({_pct(comm)} of step time)"
        )
    grew = input_side and (dw - b_dw >= DATA_WAIT_GROWTH or (au_failed and dw >= DATA_WAIT_GROWTH))
    if grew:
        cpu = [r.get("slot_cpu_util") for r in ranks if r.get("slot_cpu_util") is not None]
        slot_cpu = float(np.mean(cpu)) if cpu else None
        read = row.get("avg_read_mb_s")
        read = float(read) if read is not None and np.isfinite(read) else None
        cpu_text = f"slot CPU {slot_cpu:.0f}%" if slot_cpu is not None else "slot CPU unknown"
        wait = f"data wait {_pct(dw)} of step time{at}"
        if ceiling_mb_s and read is not None and read >= CEILING_FRACTION * ceiling_mb_s:
            return "storage", f"{wait}; storage read {read:.1f} MB/s at its {ceiling_mb_s:.1f} MB/s ceiling"
        if slot_cpu is not None and slot_cpu >= CPU_SATURATED:
            ceiling = f", storage below its {ceiling_mb_s:.1f} MB/s ceiling" if ceiling_mb_s else ""
            return "input_cpu", f"{wait}; {cpu_text} saturated while waiting{ceiling}"
        reading = f"; storage read {read:.1f} MB/s" if read is not None else ""
        return "storage", f"{wait}; {cpu_text}: the cores idle while the data does not arrive{reading}"
    comm_min = min(float(r["comm_share"]) for r in ranks)
    if comm_min - b_comm >= COMM_GROWTH:
        return "communication", (
            f"exposed communication {_pct(comm_min)}-{_pct(max(float(r['comm_share']) for r in ranks))} of step "
            f"time on every rank ({_pct(b_comm)} at {int(base['gpus'])}); no straggler (gap {_pct(gap)})"
        )
    idle = host_bound(row)
    if idle is not None:
        return "host_bound", idle
    med = statistics.median(float(r["compute_median_s"]) for r in ranks)
    b_med = statistics.median(float(r["compute_median_s"]) for r in base_ranks) if base_ranks else None
    if b_med and med / b_med - 1 >= COMPUTE_GROWTH:
        return "contention", (
            f"compute per step {med * 1e3:.0f} ms vs {b_med * 1e3:.0f} ms at {int(base['gpus'])} on equal slots "
            f"(+{_pct(med / b_med - 1)}): shared cores, caches, memory bandwidth or SMT siblings"
        )
    growth = f"+{_pct(med / b_med - 1)}" if b_med else "n/a"
    return "undetermined", (
        f"data wait {_pct(dw)}{at}, exposed communication {_pct(comm)}, compute per step {growth}, "
        f"straggler gap {_pct(gap)}: no rule holds"
    )


def baseline_row(frame: pd.DataFrame, row) -> dict | None:
    """The row of `row`'s baseline scale (same workload), or None where it did not run."""
    base = frame[(frame["workload"] == row["workload"]) & (frame["gpus"] == row.get("baseline_gpus"))]
    return base.iloc[0].to_dict() if not base.empty else None


def add_bottlenecks(
    frame: pd.DataFrame,
    straggler_gap: float,
    ceiling_mb_s: float | None,
    au_failed: set[tuple[str, int]],
    foreign_share: float = INTERFERENCE_SHARE,
) -> pd.DataFrame:
    """`bottleneck` and `bottleneck_evidence` on failing or borderline rows ('' where the scale passed
    cleanly, or host_bound where its GPU idled for the host); the slowest rank is named only where it
    is more than `straggler_gap` below the median."""
    f = frame.copy()
    f["bottleneck"], f["bottleneck_evidence"] = "", ""
    named = f["straggler_gap"].map(lambda gap: bounds.fails(bounds.STRAGGLER_GAP, gap, straggler_gap)).astype(bool)
    f["slowest_rank"] = f["slowest_rank"].where(named)
    f["slowest_host"] = f["slowest_host"].where(named, "")
    for idx, row in f.iterrows():
        if row.get("verdict") == "pass" and not bool(row.get("borderline")):
            idle = host_bound(row.to_dict()) if row.get("state") == "COMPLETED" else None
            if idle is not None:
                f.at[idx, "bottleneck"], f.at[idx, "bottleneck_evidence"] = "host_bound", idle
            continue
        if row.get("verdict") == "inconclusive" or row.get("state") != "COMPLETED":
            continue  # no figure to explain: the reason says why
        cause, evidence = diagnose(
            row.to_dict(),
            baseline_row(f, row),
            straggler_gap,
            ceiling_mb_s,
            (row["workload"], int(row["gpus"])) in au_failed,
            foreign_share=foreign_share,
        )
        f.at[idx, "bottleneck"], f.at[idx, "bottleneck_evidence"] = cause, evidence
    return f


def without_input_side(
    frame: pd.DataFrame, straggler_gap: float, ceiling_mb_s: float | None, foreign_share: float = INTERFERENCE_SHARE
):
    """row -> (cause, evidence) with the data-wait rule left out (see bench.analysis.verdict.differential)."""

    def rediagnose(row) -> tuple[str, str]:
        base = baseline_row(frame, row)
        return diagnose(row.to_dict(), base, straggler_gap, ceiling_mb_s, False, False, foreign_share)

    return rediagnose
