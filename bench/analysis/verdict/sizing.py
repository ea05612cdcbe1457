"""How many GPUs the storage can feed: measured per-GPU demand against the storage's read ceiling.

Per-GPU demand is epoch-1 read MB/s divided by the GPUs that read it, taken as the largest among the
valid scales (the most demanding scale is the one storage must keep up with). N GPUs are fed while
N x demand <= ceiling, so the supported count is floor(ceiling / demand). Beside it: the peak-based
count (the reference study's advice, sizing for the peak epoch-1 rate) and the AU reading of MLPerf
Storage, where a GPU kept at 90% accelerator utilisation needs 90% of its full-rate data.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.config.defaults import MLPERF_STORAGE_MIN_AU
from bench.errors import ResultsInputError

# Per-row columns of the results frame and store (the supported counts only on the row that set the demand).
from bench.results.schema import SIZING_COUNTS, SIZING_FLOATS

AU_TARGET = MLPERF_STORAGE_MIN_AU  # a GPU held at MLPerf Storage's AU floor needs that share of its data
_EPS = 1e-9  # floor(x / d) where x / d lands a hair under a whole number by rounding


def supported(ceiling_mb_s: float, per_gpu_mb_s: float) -> int | None:
    if not (math.isfinite(per_gpu_mb_s) and per_gpu_mb_s > 0 and math.isfinite(ceiling_mb_s)):
        return None
    return math.floor(ceiling_mb_s / per_gpu_mb_s + _EPS)


def per_scale_demand(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload, gpus) with a valid epoch-1 figure: MB/s, images/s and bytes per image per GPU."""
    f = frame.copy()
    if "workload" not in f and "model" in f:
        f = f.rename(columns={"model": "workload"})
    f = f[_usable_mask(f)]
    gpus = f["gpus"].astype(float)
    out = pd.DataFrame(
        {
            "workload": f["workload"],
            "gpus": f["gpus"].astype(int),
            "per_gpu_read_mb_s": f["avg_read_mb_s"].astype(float) / gpus,
            "per_gpu_peak_mb_s": pd.to_numeric(f.get("peak_read_mb_s"), errors="coerce") / gpus
            if "peak_read_mb_s" in f
            else np.nan,
        }
    )
    if "throughput_img_s" in f:
        out["img_s_per_gpu"] = f["throughput_img_s"].astype(float) / gpus
        # bytes per image from the read rate and the image rate of the same scale
        out["bytes_per_image"] = f["avg_read_mb_s"].astype(float) * 1e6 / f["throughput_img_s"].astype(float)
    return out.reset_index(drop=True)


def sizing(frame: pd.DataFrame, ceiling_mb_s: float) -> list[dict]:
    """Per workload: demand (largest avg and peak per GPU among valid scales) and the GPUs it allows."""
    demand = per_scale_demand(frame)
    out = []
    for workload, rows in demand.groupby("workload", sort=False):
        top = rows.loc[rows["per_gpu_read_mb_s"].idxmax()]
        avg = float(top["per_gpu_read_mb_s"])
        peak = float(rows["per_gpu_peak_mb_s"].max()) if rows["per_gpu_peak_mb_s"].notna().any() else math.nan
        out.append(
            {
                "workload": str(workload),
                "per_gpu_demand_mb_s": avg,
                "per_gpu_peak_mb_s": None if math.isnan(peak) else peak,
                "demand_from_gpus": int(top["gpus"]),
                "supported_gpus": supported(ceiling_mb_s, avg),
                "supported_gpus_peak": supported(ceiling_mb_s, peak),
                "supported_gpus_au": supported(ceiling_mb_s, AU_TARGET * avg),
                "ceiling_mb_s": ceiling_mb_s,
            }
        )
    return out


def read_sizing_csv(path) -> pd.DataFrame:
    """Any table with model (or workload), gpus, avg_read_mb_s and peak_read_mb_s; named errors."""
    from bench.analysis.frame import read_csv

    frame = read_csv(path)
    if frame.empty:
        raise ResultsInputError(f"{path}: no rows")
    if "workload" not in frame and "model" not in frame:
        raise ResultsInputError(f"{path}: missing column 'model' (or 'workload')")
    flagged = np.zeros(len(frame), dtype=bool)  # rows the table itself marks unusable may leave figures blank
    for flag in ("valid", "bandwidth_valid"):
        if flag in frame:
            frame[flag] = frame[flag].astype(str).str.strip().str.lower().isin(("true", "1", "yes"))
            flagged |= ~frame[flag].to_numpy()
    for col in ("gpus", "avg_read_mb_s", "peak_read_mb_s"):
        if col not in frame:
            raise ResultsInputError(f"{path}: missing column '{col}' (need model, gpus, avg_read_mb_s, peak_read_mb_s)")
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = ~np.isfinite(values.to_numpy(dtype=float)) | (values < 0).to_numpy()
        if col == "gpus":
            bad |= (values <= 0).to_numpy() | (values.fillna(0) % 1 != 0).to_numpy()
        else:
            bad &= ~flagged
        if bad.any():
            row = int(bad.argmax())
            raise ResultsInputError(
                f"{path}: column '{col}' row {row + 2}: {frame[col][row]!r} is not a "
                + ("positive whole number" if col == "gpus" else "finite number >= 0")
            )
        frame[col] = values
    if "throughput_img_s" in frame:
        frame["throughput_img_s"] = pd.to_numeric(frame["throughput_img_s"], errors="coerce")
    demand = per_scale_demand(frame)
    if demand.empty or not demand["per_gpu_read_mb_s"].max() > 0:
        raise ResultsInputError(
            f"{path}: column 'avg_read_mb_s': no row with a positive epoch-1 rate"
            + (" and bandwidth_valid true" if "bandwidth_valid" in frame else "")
        )
    return frame


def add_sizing(
    frame: pd.DataFrame,
    ceiling_mb_s: float | None,
    probe_nodes: int | None,
    storage_bound: str | None,
    min_supported_gpus: int | None,
) -> pd.DataFrame:
    """The results frame with per-GPU demand on every usable row, and the supported GPU counts on the row
    whose per-GPU demand is the workload's largest (the figure the storage must keep up with).

    Usable: completed, conclusive, cache-free epoch-1 bandwidth, on its own slots. `ceiling_mb_s` is None
    when no conclusive probe ran: demand is still shown, no count is claimed. It is the largest aggregate
    the probe read, on `probe_nodes` nodes at once; `storage_bound` says what binds it: 'store' (more
    nodes added no reads: the count is the store's), 'client' (the aggregate still rose: the count is
    what the nodes probed could read, a lower bound on the store's) or 'node' (one node stood out on the
    level probed: the count is that level's pace, a lower bound on the store's set by the slow node)."""
    f = frame.copy()
    for col in SIZING_FLOATS:
        f[col] = np.nan
    for col in SIZING_COUNTS:
        f[col] = pd.array([pd.NA] * len(f), dtype="Int64")
    f["storage_bound"] = ""
    conclusive = f.get("inconclusive_reason", pd.Series("", index=f.index)).fillna("") == ""
    usable = f[conclusive]
    if usable.empty:
        return f
    demand = per_scale_demand(usable)  # the usable rows, in order, re-indexed from 0
    kept = usable.index[_usable_mask(usable)]
    for col in ("per_gpu_read_mb_s", "per_gpu_peak_mb_s", "img_s_per_gpu", "bytes_per_image"):
        if col in demand:
            f.loc[kept, col] = demand[col].to_numpy(dtype=float)
    if ceiling_mb_s is None:
        return f
    f["storage_ceiling_mb_s"] = ceiling_mb_s
    f["probe_nodes"] = pd.array([probe_nodes or 1] * len(f), dtype="Int64")
    f["storage_bound"] = storage_bound or "client"
    for _, rows in f.loc[kept].groupby("workload", sort=False):
        top = rows["per_gpu_read_mb_s"].idxmax()
        if not np.isfinite(rows.at[top, "per_gpu_read_mb_s"]):
            continue
        avg, peak = rows.at[top, "per_gpu_read_mb_s"], rows["per_gpu_peak_mb_s"].max()
        f.at[top, "supported_gpus"] = supported(ceiling_mb_s, float(avg))
        f.at[top, "supported_gpus_peak"] = supported(ceiling_mb_s, float(peak))
        f.at[top, "supported_gpus_au"] = supported(ceiling_mb_s, AU_TARGET * float(avg))
        if min_supported_gpus is not None:
            f.at[top, "min_supported_gpus"] = min_supported_gpus
    return f


def _usable_mask(f: pd.DataFrame) -> np.ndarray:
    usable = np.isfinite(pd.to_numeric(f["avg_read_mb_s"], errors="coerce").to_numpy(dtype=float))
    for flag in ("valid", "bandwidth_valid"):
        if flag in f:
            usable &= f[flag].fillna(False).astype(bool).to_numpy()
    if "oversubscribed" in f:
        usable &= ~f["oversubscribed"].fillna(False).astype(bool).to_numpy()
    return usable
