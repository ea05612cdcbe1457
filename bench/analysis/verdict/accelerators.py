"""Accelerators the storage feeds at AU (MLPerf Storage's headline figure), per emulated workload.

Measured: the emulated scales ran at rising rank counts within the nodes' slots (the plan's AU search,
bench.suite.plan.scales_of); the figure is the largest count whose every scale up to it held AU >= the
workload's min_au (a count past which AU fell is named). Projected, past the largest measured count:
the storage the probe measured for a scale's nodes (bench.storage.fio_probe.storage_at through
evaluate.storage_for: nodes x one node's ceiling while under the multi-node aggregate curve's figure,
that figure above it) against the accelerators' demand at AU, the largest count N for which it and
every smaller count are fed (N x demand x min_au <= storage(N)); `basis` names what binds at N + 1:
'client' (one node's ceiling times the nodes) or 'store' (the aggregate stopped rising with nodes).
Labelled `measured: false`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from bench.analysis.verdict import bounds

_EPS = 1e-9  # the projection's demand against the storage's MB/s: a whole count a hair over by rounding
# The projection's most accelerators: past this many, the count is reported as "at least" it.
MAX_PROJECTED = 1_000_000

Storage = Callable[[int], tuple[float, str]]  # gpus -> (MB/s the storage gives that scale's nodes, bound)


def per_accelerator_mb_s(bytes_per_sample: float, batch: int, seconds_per_batch: float) -> float:
    """One accelerator's read demand at AU 1: a batch's bytes every seconds_per_batch."""
    return bytes_per_sample * batch / seconds_per_batch / 1e6


def measured_count(rows: pd.DataFrame, min_au: float) -> tuple[int | None, int | None]:
    """(largest count with AU >= min_au at it and every smaller count, the first count under it)."""
    held, fell = None, None
    for gpus, au, valid in sorted(zip(rows["gpus"], rows["au"], rows["valid"], strict=True)):
        if not bool(valid) or au is None or (isinstance(au, float) and math.isnan(au)):
            break
        if bounds.fails(bounds.AU, float(au), min_au):  # at min_au it held, as the verdict holds it
            fell = int(gpus)
            break
        held = int(gpus)
    return held, fell


def projected_count(storage: Storage, demand_at_au: float) -> tuple[int, float, str]:
    """(the largest N whose every count up to it the storage feeds at AU, the storage's MB/s at N + 1,
    what binds there): counts rise one by one, each placed on its nodes as the suite places ranks."""
    n = 0
    while n < MAX_PROJECTED:
        mb_s, bound = storage(n + 1)
        if (n + 1) * demand_at_au > mb_s + _EPS:
            return n, mb_s, bound
        n += 1
    mb_s, bound = storage(n)
    return n, mb_s, bound


def projected_entry(storage: Storage, w: dict, demand: float) -> dict:
    """The `measured: false` entry: the probe's storage for a scale's nodes over the demand at AU."""
    min_au = w["min_au"]
    count, mb_s, bound = projected_count(storage, demand * min_au)
    why = {
        "client": "one node's read ceiling x the nodes binds (the store's limit lies beyond the nodes probed)",
        "store": "the store binds (the aggregate stopped rising with nodes)",
        "node": "one slow node bound the probe's level (its slow_nodes): the store's limit lies beyond it",
    }.get(bound, bound)
    return {
        "accelerators": count,
        "measured": False,
        "accelerator": w["accelerator"],
        "min_au": min_au,
        "demand_mb_s": round(demand, 3),
        "storage_mb_s": round(mb_s, 3),
        "bound": bound,
        "basis": (
            f"projected from the probe's aggregate curve: at {count + 1} accelerators the storage gives "
            f"{mb_s:.1f} MB/s < {count + 1} x {demand:.1f} MB/s x {min_au}; {why}"
        ),
    }


def accelerators_at_au(frame: pd.DataFrame, workloads: dict[str, dict], storage: Storage | None) -> dict:
    """{workload: [measured entry, projected entry]} for each emulated workload in `workloads`
    ({name: {accelerator, min_au, batch, seconds_per_batch, record_bytes}}); each entry has `measured`.
    `storage`: gpus -> (MB/s, bound) from a conclusive probe (evaluate.storage_for), else None (no
    projection)."""
    out: dict[str, list[dict]] = {}
    for name, w in workloads.items():
        rows = frame[(frame["workload"] == name)]
        if "variant" in rows:
            rows = rows[rows["variant"].fillna("") == ""]
        min_au = w["min_au"]
        held, fell = measured_count(rows, min_au) if len(rows) else (None, None)
        top = int(rows["gpus"].max()) if len(rows) else None
        per_sample = w["record_bytes"]
        if "bytes_per_image" in rows and rows["bytes_per_image"].notna().any():
            per_sample = float(rows["bytes_per_image"].dropna().median())
        demand = per_accelerator_mb_s(per_sample, w["batch"], w["seconds_per_batch"])
        entries = [
            {
                "accelerators": held,
                "measured": True,
                "accelerator": w["accelerator"],
                "min_au": min_au,
                "largest_scale": top,
                "au_fell_at": fell,
                "basis": (
                    f"AU fell under {min_au} at {fell} accelerators"
                    if fell is not None
                    else f"AU held at every measured scale up to {top}: the storage feeds at least this many"
                ),
            }
        ]
        if fell is None and storage is not None and demand > 0:
            entries.append(projected_entry(storage, w, demand))
        out[name] = entries
    return out
