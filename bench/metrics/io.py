"""Per-epoch storage figures from rank sample timelines: honest about what the cache served."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

MB = 1e6
# An epoch whose storage served less than this share of what the loader consumed was mostly cache.
CACHE_DISTORTED_BELOW = 0.9
# The read rate is taken over the measured steps where they ran at least this long in the epoch (and at
# least this share of it); a shorter stretch gives the whole epoch's rate, as before.
MIN_MEASURED_READ_S = 5.0
MIN_MEASURED_READ_SHARE = 0.5


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
    # The seconds avg_read_mb_s is over, and over what: "measured steps" (the throughput's own steps) or
    # "whole epoch" (no measured stretch long enough); the whole epoch's rate beside it, to compare.
    read_window_s: float = 0.0
    read_window: str = "whole epoch"
    whole_epoch_read_mb_s: float = 0.0

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
    measured: tuple[float, float] | None = None,
) -> EpochIo:
    """Sum storage reads over ranks between start and end; peak is the max rate over `window_s` bins.
    `measured`: (bytes per second the epoch's measured steps consumed, summed over ranks; the shortest
    rank's measured seconds): the average rate is then that consumption times the share of consumed
    bytes the storage served in the epoch (at most 1), over the very steps the throughput is measured
    on, as MLPerf Storage's DLIO takes it (samples/s x sample bytes), the cache's part taken out.

    Why not the counter's timeline from the epoch's start: it also holds start-up (loader workers
    filling their prefetch, the warm-up's compile) that the throughput leaves out, and the end of a
    full epoch whose last batches were read before the last steps; a compute-bound scale's bandwidth
    efficiency fell 0.04-0.13 under its scaling efficiency on that alone (issue 62). Served bytes over
    consumed ones above 1 (a partial epoch's prefetch read past its last step, kernel readahead) are
    not a rate the steps drew; they stay in bytes_from_storage and the peak. The cache accounting
    (served against consumed) and the peak stay over the whole epoch."""
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
    whole = served / seconds / MB
    avg, read_s, label = whole, seconds, "whole epoch"
    if measured is not None and bytes_consumed > 0:
        rate, ran = measured
        if ran >= MIN_MEASURED_READ_S and ran >= MIN_MEASURED_READ_SHARE * seconds:
            avg, read_s, label = min(served / bytes_consumed, 1.0) * rate / MB, ran, "measured steps"
    return EpochIo(epoch, seconds, served, bytes_consumed, avg, max(peak, avg), hit, distorted, read_s, label, whole)


def cache_risk(dataset_bytes: int, aggregate_ram_bytes: int, factor: float = 5.0) -> bool:
    """MLPerf Storage's rule: a dataset under `factor` x the nodes' RAM can be served from cache."""
    return dataset_bytes < factor * aggregate_ram_bytes


def counter_ranks(reports: list[dict], key: str, node_level: bool) -> list[dict] | None:
    """The rank reports whose samples carry `key`: one per cache domain for node-level counters (ranks
    on one kernel and filesystem share a page cache, so counting each would multiply it); None when a
    domain has no rank that sampled it."""
    if not node_level:  # every rank counts its own reads (None where no rank sampled the counter: not this storage)
        return reports if any(s.get(key) is not None for r in reports for s in r["samples"]) else None
    chosen: dict[str, dict] = {}
    for r in sorted(reports, key=lambda r: r["rank"]):
        domain = r.get("cache_domain") or r["host"]
        sampled = r.get("node_sampler") and any(s.get(key) is not None for s in r["samples"])
        if sampled and domain not in chosen:
            chosen[domain] = r
    domains = {r.get("cache_domain") or r["host"] for r in reports}
    return [chosen[d] for d in sorted(domains)] if domains <= chosen.keys() else None


def measured_span(marks: list[dict]) -> tuple[float, float] | None:
    """Every rank's epoch mark -> (bytes per second its measured steps drew, summed over ranks; the
    shortest rank's measured seconds); None where a rank measured nothing in the epoch or the marks
    predate the fields.

    The bytes per second are the measured steps' images per second times the epoch's mean image bytes
    (DLIO's samples/s x sample size), not the measured steps' own bytes: which images fall in the
    measured steps differs between scales, and with variable-size images (the real models' JPEGs) their
    mean size moved a compute-bound scale's bandwidth efficiency 1-2% off its scaling efficiency on
    that alone (ssd at 2 ranks: the steps' images 1.8% under the epoch's mean). Marks without images
    (a synthetic run, or ones written before the field) keep the steps' own bytes."""
    if not marks or any(not m.get("measured_s") or m.get("measured_consumed") is None for m in marks):
        return None
    ran = min(float(m["measured_s"]) for m in marks)
    images = sum(m.get("images") or 0 for m in marks)
    if images > 0 and all(m.get("measured_images") is not None for m in marks):
        mean_bytes = sum(float(m["consumed"]) for m in marks) / images
        return sum(float(m["measured_images"]) / float(m["measured_s"]) for m in marks) * mean_bytes, ran
    return sum(float(m["measured_consumed"]) / float(m["measured_s"]) for m in marks), ran


def dataset_epochs(reports: list[dict], window_s: float) -> tuple[list[dict], str, dict[str, float]]:
    """Per-epoch storage figures from the best counter every domain has (BYTE_COUNTERS order), its
    bytes_source label, and epoch 1's bytes by every counter that saw it (a cross-check)."""
    from bench.metrics.registry import BYTE_COUNTERS, RANK_COUNTERS

    marks0 = reports[0]["epoch_marks"]
    chosen: list[dict] | None = None
    by_source: dict[str, float] = {}
    for key, label in BYTE_COUNTERS:
        ranks = counter_ranks(reports, key, node_level=key not in RANK_COUNTERS)
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
                measured_span(marks),
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
