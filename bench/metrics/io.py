"""Per-epoch storage figures from rank sample timelines: honest about what the cache served."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

MB = 1e6
# An epoch whose storage served less than this share of what the loader consumed was mostly cache.
CACHE_DISTORTED_BELOW = 0.9


@dataclass(frozen=True)
class EpochIo:
    epoch: int
    seconds: float
    bytes_from_storage: float
    bytes_consumed: float
    avg_read_mb_s: float
    peak_read_mb_s: float
    cache_hit_ratio: float | None
    cache_distorted: bool

    def as_dict(self) -> dict:
        return asdict(self)


def cumulative_at(samples: list[dict], key: str, times: np.ndarray) -> np.ndarray:
    """A rank's cumulative counter interpolated at `times` (counters are monotone)."""
    pts = [(s["t"], s[key]) for s in samples if s.get(key) is not None]
    if not pts:
        return np.zeros_like(times)
    t, v = np.array(pts).T
    return np.interp(times, t, v)


def epoch_io(
    per_rank_samples: list[list[dict]],
    epoch: int,
    start: float,
    end: float,
    bytes_consumed: float,
    window_s: float,
    key: str = "read_bytes",
) -> EpochIo:
    """Sum storage reads over ranks between start and end; peak is the max rate over `window_s` bins."""
    seconds = max(end - start, 1e-9)
    edges = np.arange(start, end + window_s, window_s)
    edges[-1] = min(edges[-1], end) if len(edges) > 1 else end
    if len(edges) < 2:
        edges = np.array([start, end])
    total = np.zeros(len(edges))
    for samples in per_rank_samples:
        total += cumulative_at(samples, key, edges)
    served = float(total[-1] - total[0])
    widths = np.diff(edges)
    rates = np.diff(total) / np.where(widths > 0, widths, np.inf)
    peak = float(rates.max()) / MB if len(rates) else 0.0
    hit = None if bytes_consumed <= 0 else max(0.0, 1.0 - served / bytes_consumed)
    distorted = bytes_consumed > 0 and served < CACHE_DISTORTED_BELOW * bytes_consumed
    return EpochIo(
        epoch,
        seconds,
        served,
        bytes_consumed,
        served / seconds / MB,
        max(peak, served / seconds / MB),
        hit,
        distorted,
    )


def cache_risk(dataset_bytes: int, aggregate_ram_bytes: int, factor: float = 5.0) -> bool:
    """MLPerf Storage's rule: a dataset under `factor` x the nodes' RAM can be served from cache."""
    return dataset_bytes < factor * aggregate_ram_bytes
