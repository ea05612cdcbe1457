"""Cluster-wide changes: the series of one cluster pooled into one figure each run (issue 63).

A real infrastructure regression (storage, network, a driver, a BIOS setting) moves every series of a
cluster in the same run: both workloads at every scale, the probe's ceiling, the checkpoint rates. A
workload's own regression moves one. One series at 1% noise cannot tell a 3% drop from its noise in
two runs without crying wolf (benchmark section 19); four series that move together can. So each run:

- every series of the cluster with history (at least noise.MIN_NOISE_RUNS reference runs: a shorter one
  stays out, named) is standardized against its own reference (its level and relative spread as the
  single-series test reads them, bad weeks left out; a sliding reference by its line carried forward,
  as noise._drift), as spreads under its level, its own one-week outliers set aside and each run
  counted at most CLIP spreads;
- the pooled figure of a run is their mean, and a window's pooled drop must also stand without the
  series that dropped most over it (_without_top: one series' own step, drift or bad week is never the
  cluster's). Its spread is estimated from the reference runs of the pooled figure itself, so the
  correlation the series already share in quiet weeks (a week that moves everything a little) is in
  it: with 1% own noise and 0.5% shared, four series pool to about 0.7% (0.63 of each series'
  spreads), not 0.5%;
- the windowed one-sided test of the single-series drop test (noise.judge_drop's shape: the newest m
  runs against the reference mean, each run low, the runs agreeing, the bound widened to Student t for a
  spread estimated from n runs) is applied to the pooled figure, with POOL_CONFIRM_Z. One run never
  confirms (the one-bad-week rule, pooled: a single bad week across the cluster is `watch`), a pair only
  where each run is a suspected drop on its own (PAIR_EACH_Z), no window with a cluster-wide bad week in
  it (_bad_weeks), and no change before the pool has MIN_REFERENCE_RUNS reference runs.

A confirmed shared drop is one alert for the cluster: its shared size (each run's median relative drop
over the pooled series, so one series' own step does not move it) with a 95% interval from that
median's own spread over the reference runs, the series that moved (their own drop over the window at
least MOVED_Z of their standard errors) and those that did not, and which kind of figure moved most
(KINDS) as the first hint at the component. A confirmed drop whose pooled figure comes back (the newest
runs each at least halfway back to the level before it, and significantly above the dropped level) is
`recovered`: one note.

A cluster with fewer than MIN_POOL series with history pools nothing and says so. The bounds were chosen
on generated clusters with seeds other than benchmark section 22's (docs/benchmarks.md section 22).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from bench.analysis.history import noise

KINDS = ("storage-bound", "compute-bound", "communication", "checkpoint")
CLIP = 4.0  # the most spreads one series' figure counts for in the pooled figure
MIN_POOL = 3  # fewer series with history: no pooled test (two series cannot tell shared from own)
# The pooled figure's bounds, as noise.CONFIRM_Z's (m runs: z, widened to Student t for the spread
# estimated from the reference). Sized for <= 2 false cluster alerts per 100 cluster-years with the
# weekly looks counted, on calibration draws (benchmark section 22's families at its seeds + 100, 100
# clusters a row): at 3.3, 2 and 3 false changes in 200 cluster-years of four and of eight 1% series,
# 92 of 100 shared 3% drops by their second run, 90 of 100 2% drops by their fourth; at 3.0, 6 and 12
# false changes for 95 and 96 (docs/benchmarks.md section 22 has the other rules tried).
POOL_CONFIRM_Z: dict[int, float] = {2: 3.3, 3: 3.3, 4: 3.3}
# Every run of a confirming window at least EACH_Z pooled standard errors down, all within AGREE_SPREADS
# of each other (times sqrt 2): a cluster-wide bad week of 3-6% is 5-6 pooled spreads and, with the
# single-series test's agreement (noise.AGREE_SPREADS, 3), carried a window of two with an ordinary week
# after it (7 false changes in 30 two-year clusters of eight, calibration draws, before the rules below).
EACH_Z = 0.5
AGREE_SPREADS = 2.5
# A pair confirms only where each of its runs is on its own a suspected drop: a cluster-wide bad week of
# 3-6% beside a week 1-2 pooled spreads low (the shared component's) otherwise reads as a shared 3% drop.
PAIR_EACH_Z = 1.5
# Reference runs the pooled spread rests on before a change can be confirmed (watch before): a pool of
# 8-20 runs read its spread low in a quarter of the calibration draws' false changes (weeks 12-24).
MIN_REFERENCE_RUNS = 26
MOVED_Z = 1.645  # a series moved: its own drop over the window this many of its standard errors (one-sided 95%)
OK, WATCH, CHANGE, RECOVERED = "ok", "watch", "change", "recovered"


@dataclass(frozen=True)
class PoolSeries:
    """One series of a cluster as the pooled test reads it: its figure at each of the cluster's runs
    (oldest first, NaN where it has none that run), what to call it and its kind (KINDS)."""

    name: str
    kind: str
    values: np.ndarray


@dataclass(frozen=True)
class Pooled:
    """The pooled judgement of a cluster's newest runs."""

    status: str  # ok, watch, change; or ok with `note` where nothing was pooled
    runs: int = 0  # the newest runs the judgement rests on
    shared_drop: float = float("nan")  # relative, positive: lower
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    z: float = float("nan")
    moved: tuple[str, ...] = ()
    unmoved: tuple[str, ...] = ()
    kind: str | None = None  # the kind of figure that moved most (by its mean relative drop)
    kinds: dict[str, float] = field(default_factory=dict)  # each kind's mean relative drop over the window
    excluded: tuple[str, ...] = ()  # series left out of the pool: too little history
    note: str = ""  # why nothing was pooled, or what was left out
    units: float = float("nan")  # the pooled drop in the series' own spreads (for recovery)

    @property
    def series_total(self) -> int:
        return len(self.moved) + len(self.unmoved)


@dataclass
class _Standardized:
    """The pooled series on one reference: their drops in spreads (clipped) and relative, per run."""

    names: list[str]
    kinds: list[str]
    spreads: np.ndarray  # series x runs: (1 - value / level) / cv, clipped to +-CLIP (the test's)
    relative: np.ndarray  # series x runs: 1 - value / level (the sizes', unclipped)
    excluded: list[str]
    raw: np.ndarray  # series x runs: the spreads unclipped (which series dropped most, _without_top)


def standardize(series: Sequence[PoolSeries], ref: np.ndarray, runs: np.ndarray) -> _Standardized:
    """Each series with a noise model on the reference runs `ref` (indexes into its values), its drop
    under that level at the runs `runs`; a series without one (too few runs) is named in `excluded`."""
    names, kinds, spreads, relative, excluded, raw = [], [], [], [], [], []
    for s in series:
        level, cv = _level_cv(s.values[ref])
        if cv is None or not level > 0:
            excluded.append(s.name)
            continue
        level, cv = _drifting(s.values[ref], np.asarray(ref), np.asarray(runs), level, cv)
        drop = _own_bad_weeks_aside(1 - s.values[runs] / level, cv)
        names.append(s.name)
        kinds.append(s.kind)
        spreads.append(np.clip(drop / cv, -CLIP, CLIP))
        relative.append(drop)
        raw.append(drop / cv)
    width = len(runs)
    shape = (len(names), width)
    return _Standardized(
        names,
        kinds,
        np.array(spreads, dtype=float).reshape(shape),
        np.array(relative, dtype=float).reshape(shape),
        excluded,
        np.array(raw, dtype=float).reshape(shape),
    )


def _drifting(before: np.ndarray, at: np.ndarray, runs: np.ndarray, level: float, cv: float):
    """(level at each of `runs`, spread) of a series: its reference's least-squares line carried forward
    where the reference slides (the slope beyond noise.DRIFT_T standard errors either way, runs near its
    median only), the spread about that line; else the flat `level` and `cv`. A series drifting 10% a
    year sits 5% under the mean of a year's reference by its end: as the single-series test
    (noise._drift), the pool measures it from its line, or it alone moved a pool of four week after week
    (and a drift up widened the pooled spread)."""
    finite = np.isfinite(before)
    y, x = before[finite], at[finite].astype(float)
    median = float(np.median(y))
    near = np.abs(y / median - 1) <= noise.OUTLIER_SPREADS * cv
    y, x = y[near], x[near]
    if y.size < noise.MIN_NOISE_RUNS:
        return level, cv
    centre = float(x.mean())
    xc = x - centre
    sxx = float(xc @ xc)
    slope = float(xc @ (y - y.mean()) / sxx)
    resid = y - y.mean() - slope * xc
    spread = math.sqrt(float(resid @ resid) / (y.size - 2))
    if not (spread > 0 and abs(slope) / (spread / math.sqrt(sxx)) > noise.DRIFT_T):
        return level, cv
    return float(y.mean()) + slope * (runs - centre), max(noise.NOISE_CV_FLOOR, spread / float(y.mean()))


def _nanmean(rows: np.ndarray, axis: int = 0) -> np.ndarray:
    """The mean over the series (rows; axis 1: over the runs of each series) ignoring NaN, NaN where none
    has a figure (no warning: a run of the cluster that none of the pooled series has is ordinary)."""
    counts = np.isfinite(rows).sum(axis=axis)
    sums = np.nansum(rows, axis=axis)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _own_bad_weeks_aside(drop: np.ndarray, cv: float) -> np.ndarray:
    """A series' drops with its own one-week outliers set aside (NaN): a run more than
    noise.OUTLIER_SPREADS of its spreads beyond both neighbours on the same side (a bad node, a 20-35% dip),
    as the single-series test sets them aside (detect.DROP_OUTLIERS); the newest run is never one yet. Two
    series' dips in one week otherwise moved a pool of eight as far as a shared 2% drop."""
    d = drop / cv
    out = drop.copy()
    if d.size < 3:
        return out
    before, after = d[1:-1] - d[:-2], d[1:-1] - d[2:]
    far = (before * after > 0) & (np.fmin(np.abs(before), np.abs(after)) > noise.OUTLIER_SPREADS)
    out[1:-1][far] = np.nan
    return out


def _level_cv(values: np.ndarray) -> tuple[float, float | None]:
    """(level, relative spread) of a series' reference runs as the single-series test reads them
    (noise._level, noise._reference_spread: the same arithmetic with one median, as the weekly replay
    standardizes every series at every run); spread None: no noise model (too few runs)."""
    a = values[np.isfinite(values)]
    if a.size < noise.MIN_NOISE_RUNS:
        return float("nan"), None
    median = float(np.median(a))
    if median <= 0:
        return median, None
    squares = np.sort(np.diff(a) ** 2)
    kept = squares[: max(1, math.floor(noise.TRIM_KEEP * squares.size))]
    differences = math.sqrt(float(kept.mean()) / noise.TRIMMED_SQUARE_MEAN / 2) / median
    off = np.abs(a / median - 1)
    near = a[off <= noise.OUTLIER_SPREADS * max(differences, noise.NOISE_CV_FLOOR)]
    if near.size < noise.MIN_NOISE_RUNS:
        cv = max(noise.NOISE_CV_FLOOR, differences)
    else:
        cv = max(noise.NOISE_CV_FLOOR, float(near.std(ddof=1)) / median)
    usable = off <= noise.OUTLIER_SPREADS * cv
    if int(usable.sum()) < noise.MIN_NOISE_RUNS:
        return median, None
    return float(a[usable].mean()), cv


def _spread(values: np.ndarray) -> tuple[float, float, int]:
    """(mean, standard deviation, runs) of a pooled reference, runs further than noise.OUTLIER_SPREADS
    robust spreads from its median left out (a cluster-wide bad week in the reference would widen it)."""
    v = values[np.isfinite(values)]
    if v.size < 3:
        return float("nan"), float("nan"), 0
    median = float(np.median(v))
    mad = 1.4826 * float(np.median(np.abs(v - median)))
    kept = v[np.abs(v - median) <= noise.OUTLIER_SPREADS * mad] if mad > 0 else v
    if kept.size < 3:
        kept = v
    return float(kept.mean()), float(kept.std(ddof=1)), int(kept.size)


@functools.lru_cache(maxsize=1024)
def _critical(bound: float, n: int) -> float:
    """The bound a pooled z must pass when the pooled spread is estimated from `n` reference runs: the
    Student t quantile (n - 1 degrees of freedom) of the normal tail of `bound`."""
    from scipy.stats import norm, t

    return math.inf if not math.isfinite(bound) else float(t.ppf(norm.cdf(bound), max(2, n - 1)))


def judge_pool(
    series: Sequence[PoolSeries], ref: np.ndarray, new: np.ndarray, confirm_z: dict[int, float] | None = None
) -> Pooled:
    """The pooled judgement of the runs `new` (indexes, oldest first, at most noise.MAX_RUNS) against the
    reference runs `ref`: `change` where m >= 2 of the newest runs confirm a shared drop at
    `confirm_z` (None: POOL_CONFIRM_Z), `watch` where one run (or a window at the watch bounds) is
    suspect, else `ok`; `ok` with a note where fewer than MIN_POOL series have history."""
    bounds = POOL_CONFIRM_Z if confirm_z is None else confirm_z
    new = np.asarray(new, dtype=int)[-noise.MAX_RUNS :]
    ref = np.asarray(ref, dtype=int)[-noise.REFERENCE_RUNS :]
    std = standardize(series, ref, np.r_[ref, new])
    left_out = f"left out (too little history): {', '.join(std.excluded)}" if std.excluded else ""
    if len(std.names) < MIN_POOL:
        note = f"{len(std.names)} series with history, {MIN_POOL} needed: nothing pooled"
        return Pooled(OK, excluded=tuple(std.excluded), note="; ".join(x for x in (note, left_out) if x))
    judged = _judge_windows(std, ref.size, new.size)
    if not judged:
        return Pooled(OK, excluded=tuple(std.excluded), note="the pooled reference has too few runs")
    tables = ((CHANGE, bounds), (WATCH, noise.WATCH_CONFIRM_Z))
    # Of the windows that confirm, the one with the largest z: where the drop began (a longer window
    # that takes in a run before the drop reads a smaller drop).
    for status, table in tables:
        passing = [
            m
            for m, (z, n, _) in judged.items()
            if m >= 2
            and not (status == CHANGE and n < MIN_REFERENCE_RUNS)  # a young pool's spread: watch, never a change
            and z >= _critical(table.get(m, math.inf), n)
        ]
        if passing:
            best = max(passing, key=lambda m: judged[m][0])
            return replace(_describe(std, best, ref.size, judged[best][2]), status=status, note=left_out)
    z, n, stats = judged.get(1, (-math.inf, 0, None))
    if stats is not None and z >= _critical(noise.WATCH_Z, n):
        return replace(_describe(std, 1, ref.size, stats), status=WATCH, note=left_out)
    # nothing suspect: what was pooled, without the sizes (most weeks of most clusters: kept cheap)
    return Pooled(OK, runs=1, z=z, unmoved=tuple(std.names), excluded=tuple(std.excluded), note=left_out)


def _judge_windows(std: _Standardized, n_ref: int, newest: int) -> dict[int, tuple[float, int, tuple]]:
    """{m: (z of the newest m runs, reference runs of the pooled spread, (pooled figure, mean, sd, n))}
    for m = newest..1, each z no more than the same window's without the series that dropped most over
    it (_without_top); {} where the pool's reference has too few runs."""
    pooled = _nanmean(std.spreads)
    mean, sd, n = _spread(pooled[:n_ref])
    if not (sd > 0 and n >= noise.MIN_NOISE_RUNS):
        return {}
    aside = _bad_weeks(pooled, n_ref, sd)
    judged = {}
    width = std.spreads.shape[1]
    for m in range(newest, 0, -1):
        window = slice(width - m, width)
        z = -math.inf if m >= 2 and aside[window].any() else _window(pooled[window], mean, sd, n)
        if z >= _critical(noise.WATCH_Z, n):  # it may be suspect: one series alone must not be what moved it
            z = min(z, _without_top(std, n_ref, window))
        judged[m] = (z, n, (pooled, mean, sd, n))
    return judged


def _without_top(std: _Standardized, n_ref: int, window: slice) -> float:
    """The pooled window's z (_window) with the series that dropped most over it left out (reference and
    window alike): a drop one series carries alone is that series' change, not the cluster's (its own
    step, drift or bad week counts up to CLIP spreads, a quarter of them in a pool of four, week after
    week); a drop every series shares stands without any one of them."""
    own = _nanmean(std.raw[:, window], axis=1)
    top = int(np.nanargmax(own)) if np.isfinite(own).any() else 0
    pooled = _nanmean(np.delete(std.spreads, top, axis=0))
    mean, sd, n = _spread(pooled[:n_ref])
    if not (sd > 0 and n >= 3):
        return -math.inf
    return _window(pooled[window], mean, sd, n)


def _bad_weeks(pooled: np.ndarray, n_ref: int, sd: float) -> np.ndarray:
    """The runs after the reference (not the newest: the week after tells) that lie more than
    noise.OUTLIER_SPREADS pooled spreads beyond both neighbours on the same side: a cluster-wide bad week
    (a storage incident, a busy week), which no window with it confirms (the one-bad-week rule, pooled:
    the single-series test sets such a run aside, detect.DROP_OUTLIERS)."""
    out = np.zeros(pooled.size, dtype=bool)
    for i in range(max(n_ref, 1), pooled.size - 1):
        before, after = pooled[i] - pooled[i - 1], pooled[i] - pooled[i + 1]
        out[i] = before * after > 0 and min(abs(before), abs(after)) > noise.OUTLIER_SPREADS * sd
    return out


def _window(runs: np.ndarray, mean: float, sd: float, n: int) -> float:
    """The window's z where its runs hold a level (each at least EACH_Z one-run standard errors down,
    all within AGREE_SPREADS of each other), else -inf: a cluster-wide bad week beside an ordinary
    one is no level."""
    runs = runs[np.isfinite(runs)]
    if runs.size == 0:
        return -math.inf
    m = runs.size
    each = (runs.min() - mean) / (sd * math.sqrt(1 + 1 / n))
    agree = runs.max() - runs.min() <= AGREE_SPREADS * sd * math.sqrt(2)
    if m >= 2 and not (each >= (PAIR_EACH_Z if m == 2 else EACH_Z) and agree):
        return -math.inf
    return (float(runs.mean()) - mean) / (sd * math.sqrt(1 / m + 1 / n))


def _describe(std: _Standardized, m: int, n_ref: int, stats: tuple) -> Pooled:
    """The newest m runs' shared drop (relative, with its 95% interval), the series that moved, the kind
    that moved most. The shared size is each run's median drop over the series (one series' own step or
    bad week does not move it), its interval from the spread of that median over the reference runs."""
    pooled, mean, sd, n = stats
    width = std.spreads.shape[1]
    window = slice(width - m, width)
    with warnings.catch_warnings():  # a run none of the pooled series has: NaN, as _nanmean's
        warnings.simplefilter("ignore", RuntimeWarning)
        rel = np.nanmedian(std.relative, axis=0)
    mean_rel, sd_rel, n_rel = _spread(rel[:n_ref])
    size = float(np.nanmean(rel[window])) - mean_rel
    se = sd_rel * math.sqrt(1 / m + 1 / max(n_rel, 1))
    units = float(np.nanmean(pooled[window])) - mean
    z = units / (sd * math.sqrt(1 / m + 1 / n))
    own = _nanmean(std.spreads[:, window], axis=1)  # each series' drop over the window, in its spreads
    moved = own >= MOVED_Z * math.sqrt(1 / m + 1 / n)
    kinds: dict[str, list[float]] = {}
    for kind, drop in zip(std.kinds, _nanmean(std.relative[:, window], axis=1), strict=True):
        kinds.setdefault(kind, []).append(float(drop))
    means = {k: float(np.mean(v)) for k, v in kinds.items()}
    return Pooled(
        OK,
        runs=m,
        shared_drop=size,
        ci_low=size - 1.96 * se,
        ci_high=size + 1.96 * se,
        z=z,
        moved=tuple(name for name, yes in zip(std.names, moved, strict=True) if yes),
        unmoved=tuple(name for name, yes in zip(std.names, moved, strict=True) if not yes),
        kind=max(means, key=means.get) if means else None,
        kinds=means,
        excluded=tuple(std.excluded),
        units=units,
    )


@dataclass(frozen=True)
class ClusterEvent:
    """A cluster change as the weekly runs saw it: `change` (a shared drop confirmed; `at` the first run
    of the drop, `detected` the run that confirmed it) or `recovered` (`at` the first run back)."""

    kind: str  # CHANGE or RECOVERED
    at: int
    detected: int
    judged: Pooled
    closes: int | None = None  # a recovery: the first run of the change it closes (one note for that change)


@dataclass
class _Open:
    """A confirmed shared drop that has not recovered: the reference before it and where it began."""

    start_before: int  # the first run of the level before the drop
    at: int  # the drop's first run
    ref: np.ndarray  # the reference runs it was measured against
    units: float  # its size in the series' spreads
    event: ClusterEvent


@dataclass
class PoolReplay:
    """What replay_pool found: the events, and the judgement of the newest run (the cluster's status now:
    `change` while a shared drop it confirmed is open, else that run's `watch` or `ok`)."""

    events: list[ClusterEvent]
    latest: Pooled
    status: str
    open_change: ClusterEvent | None


def _windows(usable: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """(reference, newest) run indexes of the current level's runs, as detect.latest_drop splits them."""
    k = min(noise.MAX_RUNS, len(usable) - noise.MIN_NOISE_RUNS)
    if k < 1:
        return None
    return np.asarray(usable[:-k], dtype=int), np.asarray(usable[-k:], dtype=int)


def replay_pool(series: Sequence[PoolSeries], runs: int, confirm_z: dict[int, float] | None = None) -> PoolReplay:
    """The pooled test after every run of a cluster (`runs` of them; each series' values aligned to them),
    as the weekly check runs it: a shared drop confirmed once is one `change` event, its level the new
    reference from its first run on; a confirmed drop that comes back is one `recovered` event, after
    which the runs it spanned are left out and the level before it is the reference again."""
    start, skipped = 0, set()
    opened: _Open | None = None
    events: list[ClusterEvent] = []
    latest = Pooled(OK, note="no run judged yet")
    for t in range(runs):
        usable = [i for i in range(start, t + 1) if i not in skipped]
        if opened is not None:
            back = _recovery(series, opened, t)
            if back is not None:
                events.append(ClusterEvent(RECOVERED, back, t, opened.event.judged, opened.at))
                skipped |= set(range(opened.at, back))
                start, opened = opened.start_before, None
                usable = [i for i in range(start, t + 1) if i not in skipped]
        split = _windows(usable)
        if split is None:
            continue
        latest = judge_pool(series, *split, confirm_z)
        if latest.status == CHANGE:
            at = int(split[1][-latest.runs])
            event = ClusterEvent(CHANGE, at, t, latest)
            events.append(event)
            opened = _Open(start, at, split[0], latest.units, event)
            start = at
    status = CHANGE if opened is not None else latest.status
    return PoolReplay(events, latest, status, opened.event if opened is not None else None)


def _recovery(series: Sequence[PoolSeries], opened: _Open, t: int) -> int | None:
    """The first run of a recovery of the open drop at run t, or None: the newest m >= 2 runs (after at
    least one run of the dropped level besides the confirming ones) each at least halfway back to the
    level before the drop, and above the dropped level by the pooled bound."""
    after = np.arange(opened.at, t + 1)
    std = standardize(series, opened.ref, np.r_[opened.ref, after])
    if len(std.names) < MIN_POOL:
        return None
    pooled = _nanmean(std.spreads)
    mean, sd, n = _spread(pooled[: opened.ref.size])
    dropped = pooled[opened.ref.size :]
    if not sd > 0:
        return None
    for m in range(min(noise.MAX_RUNS, dropped.size - 1), 1, -1):
        newest, low = dropped[-m:], dropped[:-m]
        level = float(np.nanmean(low))  # the dropped level, in spreads under the level before
        if float(np.nanmax(newest)) - mean > opened.units / 2:
            continue  # a run of the window not halfway back to the level before the drop
        z = (level - float(np.nanmean(newest))) / (sd * math.sqrt(1 / m + 1 / low.size))
        if z >= _critical(POOL_CONFIRM_Z.get(m, math.inf), n):
            return int(after[-m])
    return None
