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


def counter_ranks(reports: list[dict], key: str, node_level: bool) -> list[dict] | None:
    """The rank reports whose samples carry `key`: one per cache domain for node-level counters (ranks
    on one kernel and filesystem share a page cache, so counting each would multiply it); None when a
    domain has no rank that sampled it."""
    if not node_level:
        return reports
    chosen: dict[str, dict] = {}
    for r in sorted(reports, key=lambda r: r["rank"]):
        domain = r.get("cache_domain") or r["host"]
        sampled = r.get("node_sampler") and any(s.get(key) is not None for s in r["samples"])
        if sampled and domain not in chosen:
            chosen[domain] = r
    domains = {r.get("cache_domain") or r["host"] for r in reports}
    return [chosen[d] for d in sorted(domains)] if domains <= chosen.keys() else None


def dataset_epochs(reports: list[dict], window_s: float) -> tuple[list[dict], str, dict[str, float]]:
    """Per-epoch storage figures from the best counter every domain has (BYTE_COUNTERS order), its
    bytes_source label, and epoch 1's bytes by every counter that saw it (a cross-check)."""
    from bench.metrics.registry import BYTE_COUNTERS

    marks0 = reports[0]["epoch_marks"]
    chosen: list[dict] | None = None
    by_source: dict[str, float] = {}
    for key, label in BYTE_COUNTERS:
        ranks = counter_ranks(reports, key, node_level=key != "read_bytes")
        if ranks is None:
            continue
        window = window_s
        if label == "pagecache":
            methods = {r.get("pagecache_method") for r in ranks}
            label = methods.pop() if len(methods) == 1 and None not in methods else "pagecache"
            # The scan's timeline resolves no finer than one pass over the pending files: the peak is
            # taken over bins at least that long, never over bins the scan had not yet reached.
            periods = [s.get("dataset_scan_period_s") or 0.0 for r in ranks for s in r["samples"]]
            window = max(window_s, float(np.median(periods)) if periods else 0.0)
        epochs = []
        for k, mark in enumerate(marks0):
            marks = [r["epoch_marks"][k] for r in reports]
            io = epoch_io(
                [r["samples"] for r in ranks],
                mark["epoch"],
                min(m["start"] for m in marks),
                max(m["end"] for m in marks),
                sum(m["consumed"] for m in marks),
                window,
                key,
            )
            images = sum(m["images"] or 0 for m in marks)
            epochs.append({**io.as_dict(), "seconds": max(m["seconds"] for m in marks), "images": int(images)})
        if epochs:
            by_source[label] = epochs[0]["bytes_from_storage"]
        if chosen is None:
            chosen, source = epochs, label
    if chosen is None:  # procio is always there; kept for type checkers
        raise ValueError("no byte counter in the rank samples")
    return chosen, source, by_source
