"""Whether the storage could bind a scale at all: bandwidth is judged where it can, not where it cannot.

A compute-bound scale reads exactly as fast as it computes: SSD on a CPU reads ~1.4 MB/s from a store whose
ceiling is 2,000 MB/s. Its epoch-1 read rate only follows its images/s, so its bandwidth efficiency is its
scaling efficiency seen through a noisier window (the read rate averaged over epoch 1 from the start, the
throughput over the measured steps), and a bandwidth bound failed such a scale on noise the storage had no
part in. MLPerf Storage judges a store by whether the accelerators waited for data (AU) against what the
store gives; this rule follows it:

a scale is `storage_idle` (its bandwidth efficiency not judged; the reason says why) when its epoch-1 read
rate is under FAR_BELOW of what the store gives the nodes it trains on (the storage probe's ceiling at that
scale) AND its ranks' data wait did not grow by DATA_WAIT_GROWTH of step time over its baseline's. A
storage-bound scale (reads near the ceiling, or waiting for data) is judged exactly as before; without a
conclusive probe nothing is known of the store, and every scale is judged as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from bench.analysis.verdict.bottleneck import DATA_WAIT_GROWTH

# Reads under this share of the store's ceiling are demand the store meets with room to spare.
FAR_BELOW = 0.25


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def idle_reason(row: dict, base: dict | None, store_mb_s: float | None) -> str:
    """Why `row`'s bandwidth cannot be the storage's ('' where it can, or where that is not known)."""
    read, wait = row.get("avg_read_mb_s"), row.get("data_wait_share")
    if not (_finite(store_mb_s) and store_mb_s > 0 and _finite(read) and _finite(wait)):
        return ""
    base_wait = base.get("data_wait_share") if base else None
    grew = float(wait) - (float(base_wait) if _finite(base_wait) else 0.0)
    if float(read) >= FAR_BELOW * store_mb_s or grew >= DATA_WAIT_GROWTH:
        return ""
    return (
        f"not storage-bound: reads {float(read):.1f} MB/s, {float(read) / store_mb_s:.1%} of the "
        f"{store_mb_s:.0f} MB/s the store gives this scale, and data wait grew {grew:+.1%} of step time "
        "(its bandwidth follows its compute; not judged on bandwidth)"
    )


def storage_idle(frame: pd.DataFrame, store_at: Callable[[int], float | None] | None) -> pd.Series:
    """Per row, idle_reason against its baseline scale and what the store gives it (`store_at(gpus)`:
    MB/s, None where unknown); all '' without a store figure."""
    out = []
    for r in frame.to_dict("records"):
        base = frame[(frame["workload"] == r["workload"]) & (frame["gpus"] == r.get("baseline_gpus"))]
        store = store_at(int(r["gpus"])) if store_at else None
        out.append(idle_reason(r, base.iloc[0].to_dict() if not base.empty else None, store))
    return pd.Series(out, index=frame.index, dtype=object)
