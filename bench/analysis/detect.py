"""Change points in weekly history, per (workload, GPUs, metric), with Apache Otava's E-Divisive."""

from __future__ import annotations

import pandas as pd

from bench.errors import ResultsInputError

# Weekly history of every (workload, GPUs) of a large deployment for decades fits in this; a larger
# file is a mistake (or an attack on the worker's memory) and is refused before it is parsed whole.
MAX_HISTORY_BYTES = 256 << 20
MAX_HISTORY_ROWS = 1_000_000


def read_history_csv(path, metric: str) -> pd.DataFrame:
    import os

    from bench.analysis.frame import read_csv

    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0  # read_csv names a missing file
    if size > MAX_HISTORY_BYTES:
        raise ResultsInputError(f"{path}: {size} bytes; history files are limited to {MAX_HISTORY_BYTES} bytes")
    frame = read_csv(path)
    if len(frame) > MAX_HISTORY_ROWS:
        raise ResultsInputError(f"{path}: {len(frame)} rows; history files are limited to {MAX_HISTORY_ROWS} rows")
    for col in ("timestamp", "model", "gpus", metric):
        if col not in frame.columns:
            raise ResultsInputError(f"{path}: missing column '{col}' (need timestamp,model,gpus,{metric})")
    if frame.empty:
        raise ResultsInputError(f"{path}: no rows")
    values = pd.to_numeric(frame[metric], errors="coerce")
    if (values.isna() & frame[metric].notna()).any():
        row = int((values.isna() & frame[metric].notna()).idxmax())
        raise ResultsInputError(f"{path}: column '{metric}' row {row + 2}: {frame[metric][row]!r} is not a number")
    gpus = pd.to_numeric(frame["gpus"], errors="coerce")
    if gpus.isna().any() or (gpus <= 0).any():
        row = int((gpus.isna() | (gpus <= 0)).idxmax())
        raise ResultsInputError(f"{path}: column 'gpus' row {row + 2}: must be a whole number > 0")
    stamps = pd.to_datetime(frame["timestamp"], errors="coerce", utc=True)
    if stamps.isna().any():
        row = int(stamps.isna().idxmax())
        raise ResultsInputError(f"{path}: column 'timestamp' row {row + 2}: {frame['timestamp'][row]!r} is not a date")
    return frame.assign(**{metric: values, "gpus": gpus.astype(int), "timestamp": stamps})


def change_points(
    history: pd.DataFrame,
    metric: str,
    max_pvalue: float = 0.001,
    window_len: int = 30,
    min_magnitude: float = 0.0,
) -> list[dict]:
    from otava.analysis import compute_change_points

    found = []
    for (model, gpus), group in history.sort_values("timestamp").groupby(["model", "gpus"], sort=True):
        series = group[metric].dropna()
        if len(series) < 4:
            continue
        stamps = group.loc[series.index, "timestamp"].tolist()
        cps, _ = compute_change_points(
            series.tolist(), window_len=window_len, max_pvalue=max_pvalue, min_magnitude=min_magnitude
        )
        for cp in cps:
            found.append(
                {
                    "model": str(model),
                    "gpus": int(gpus),
                    "timestamp": stamps[cp.index].isoformat(),
                    "before": float(cp.stats.mean_1),
                    "after": float(cp.stats.mean_2),
                    "change": float(cp.stats.forward_rel_change()),
                    "pvalue": float(cp.stats.pvalue),
                }
            )
    return found
