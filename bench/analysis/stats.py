"""95% intervals for throughput and scaling efficiency: a moving-block bootstrap over measured steps.

Why a block bootstrap: consecutive step times are correlated (a slow page-in or a noisy neighbour lasts
several steps), so resampling single steps would understate the spread. Blocks of ceil(n^(1/3)) steps
keep that correlation. Each rank is resampled on its own; a replicate of the run's throughput is the
sum of its ranks' replicates (what the run reports, never N x one rank). Scaling efficiency's interval
comes from the ratio of independent replicates of the scale and its baseline. A fixed seed makes the
same steps always give the same interval.
"""

from __future__ import annotations

import math

import numpy as np

REPLICATES = 2000
SEED = 20261203
LEVEL = 0.95


def _block_means(times: np.ndarray, rng: np.random.Generator, replicates: int) -> np.ndarray:
    """Replicates of the mean step time of one rank."""
    n = len(times)
    block = max(1, math.ceil(n ** (1 / 3)))
    starts = rng.integers(0, n - block + 1, size=(replicates, math.ceil(n / block)))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(replicates, -1)[:, :n]
    return times[idx].mean(axis=1)


def throughput_replicates(step_times_per_rank: list[list[float]], batch_size: int) -> np.ndarray:
    """Bootstrap replicates of the run's images/s (sum over ranks); empty when a rank has no steps."""
    rng = np.random.default_rng(SEED)
    total = np.zeros(REPLICATES)
    for times in step_times_per_rank:
        arr = np.asarray(times, dtype=float)
        if len(arr) == 0 or not np.all(np.isfinite(arr)) or arr.sum() <= 0:
            return np.array([])
        total += batch_size / _block_means(arr, rng, REPLICATES)
    return total


def interval(replicates: np.ndarray) -> tuple[float, float]:
    if len(replicates) == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(replicates, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return float(lo), float(hi)


def efficiency_interval(scale: np.ndarray, base: np.ndarray, gpus_ratio: float) -> tuple[float, float]:
    """Interval of (throughput_N / throughput_base) / (N / base) from independent replicates."""
    if len(scale) == 0 or len(base) == 0:
        return math.nan, math.nan
    return interval(scale / base / gpus_ratio)


def step_time_spread(step_times_per_rank: list[list[float]]) -> float:
    """The worst rank's (p90 - p10) / median of its step times: how steady the measured window was."""
    worst = 0.0
    for times in step_times_per_rank:
        arr = np.asarray(times, dtype=float)
        if len(arr) < 2:
            continue
        p10, p50, p90 = np.quantile(arr, [0.1, 0.5, 0.9])
        if p50 > 0:
            worst = max(worst, float((p90 - p10) / p50))
    return worst
