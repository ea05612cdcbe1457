"""Accelerators the storage feeds at AU (MLPerf Storage's headline figure), per emulated workload.

Measured: the emulated scales ran at rising rank counts within the nodes' slots; the figure is the
largest count whose every scale up to it held AU >= the workload's min_au (a count past which AU fell
is named). Projected: past the largest measured count, the storage probe's read ceiling over one
accelerator's demand at that AU, floor(ceiling / (bytes per batch / seconds per batch x min_au)),
labelled `measured: false` (the multi-node aggregate curve of `bench project` replaces the ceiling
once it exists; until then the single-client fio ceiling is the basis, and says so).
"""

from __future__ import annotations

import math

import pandas as pd

_EPS = 1e-9


def per_accelerator_mb_s(bytes_per_sample: float, batch: int, seconds_per_batch: float) -> float:
    """One accelerator's read demand at AU 1: a batch's bytes every seconds_per_batch."""
    return bytes_per_sample * batch / seconds_per_batch / 1e6


def measured_count(rows: pd.DataFrame, min_au: float) -> tuple[int | None, int | None]:
    """(largest count with AU >= min_au at it and every smaller count, the first count under it)."""
    held, fell = None, None
    for gpus, au, valid in sorted(zip(rows["gpus"], rows["au"], rows["valid"], strict=True)):
        if not bool(valid) or au is None or (isinstance(au, float) and math.isnan(au)):
            break
        if float(au) + _EPS < min_au:
            fell = int(gpus)
            break
        held = int(gpus)
    return held, fell


def accelerators_at_au(frame: pd.DataFrame, workloads: dict[str, dict], ceiling_mb_s: float | None) -> dict:
    """{workload: [measured entry, projected entry]} for each emulated workload in `workloads`
    ({name: {accelerator, min_au, batch, seconds_per_batch, record_bytes}}); each entry has `measured`."""
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
        if fell is None and ceiling_mb_s is not None and demand > 0:
            entries.append(
                {
                    "accelerators": math.floor(ceiling_mb_s / (demand * min_au) + _EPS),
                    "measured": False,
                    "accelerator": w["accelerator"],
                    "min_au": min_au,
                    "demand_mb_s": round(demand, 3),
                    "basis": f"projected: fio read ceiling {ceiling_mb_s:.1f} MB/s / ({demand:.1f} MB/s x {min_au})",
                }
            )
        out[name] = entries
    return out
