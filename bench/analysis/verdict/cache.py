"""Which epoch-1 bandwidth figures a cache served: the figure stays in the table, labelled, never judged.

A client evicts its own page cache before epoch 1 (bench train --drop-caches), but not a NAS's: the
reference study's storage throughput fell above 32 GPUs because its 3 TB dataset fit the storage
servers' cache. Two rules, either one labels a row `cache_served`:
- declared: the suite's `storage_cache` (the storage's own RAM/flash tier) could hold the dataset;
- measured: each node read faster on average than fio's cold read ceiling of the same storage from
  one node (with CEILING_SLACK for the probe's own noise): no cold disk delivers that.
A cache-served figure is not a storage figure: `bandwidth_valid` is false and the note says why.
"""

from __future__ import annotations

import json

import pandas as pd

CEILING_SLACK = 1.15  # the probe's run-to-run spread on this machine reached +-12% (3 s levels)


def _hosts(row: pd.Series) -> int:
    try:
        ranks = json.loads(row.get("rank_breakdown") or "[]")
    except (TypeError, ValueError):
        ranks = []
    return max(1, len({r.get("host") for r in ranks if isinstance(r, dict)}))


def label_cache_served(
    frame: pd.DataFrame, storage_cache_bytes: int | None, ceiling_mb_s: float | None
) -> pd.DataFrame:
    f = frame.copy()
    served, notes = [], []
    for _, r in f.iterrows():
        note = ""
        dataset = r.get("dataset_bytes")
        rate = r.get("avg_read_mb_s")
        if storage_cache_bytes and pd.notna(dataset) and 0 < dataset <= storage_cache_bytes:
            note = (
                f"cache-served: the dataset ({dataset / 1e9:.3g} GB) fits the storage's declared cache "
                f"({storage_cache_bytes / 1e9:.3g} GB)"
            )
        elif ceiling_mb_s and pd.notna(rate) and rate / _hosts(r) > CEILING_SLACK * ceiling_mb_s:
            note = (
                f"cache-served: {rate / _hosts(r):.1f} MB/s per node in epoch 1, above the storage's cold "
                f"read ceiling {ceiling_mb_s:.1f} MB/s (fio)"
            )
        served.append(bool(note))
        notes.append(note)
    f["cache_served"] = served
    hit = pd.Series(served, index=f.index)
    f.loc[hit, "cache_risk"] = True
    f.loc[hit, "bandwidth_valid"] = False
    f.loc[hit, "bandwidth_note"] = [n for n in notes if n]
    return f
