"""The per-series noise model, and the one judgement of a recent drop that verdict, alerts, overview,
report and API share (issue 54).

A weekly series' own spread decides what drop it can resolve: on a quiet GPU cluster (about 1% week to
week) a 3% drop is three spreads and a real fault, and a fixed 10% tolerance never sees it. So each
series gets `noise_cv`, its relative week-to-week spread, estimated from its accepted history: the runs'
standard deviation around their level, bad weeks (beyond OUTLIER_SPREADS of the trimmed first
differences' spread, which a step or a bad week barely moves) left out, and floored at NOISE_CV_FLOOR,
because a handful of lucky runs would otherwise make every 1% wobble a regression. A series with fewer
than MIN_NOISE_RUNS accepted runs has no noise model: it is judged on the fixed `regression_tolerance`
alone and says so (`noise_cv` empty), never on a guessed spread.

The detector is a windowed one-sided test of the residuals standardized by that spread: the newest m runs
(m = 1..MAX_RUNS, the runs since the drop began) against the level of up to REFERENCE_RUNS runs before
them (their mean, bad weeks left out): z = drop / (noise_cv x sqrt(1/m + 1/n)), its bound widened to
Student t for a spread estimated from n runs (_critical). One run beyond WATCH_Z is a suspected drop
(`watch`: shown, not alerted), and so is a drop m >= 2 runs confirm at issue 54's bounds
(WATCH_CONFIRM_Z) but not at CONFIRM_Z (issue 63: alerts a team keeps reading; shown with its size,
interval and runs). m >= 2 runs beyond CONFIRM_Z[m] confirm a drop (`regressed`), alerted
with its size, its 95% interval and the number of runs that confirmed it, if the runs hold a level: each
under the reference level by at least EACH_Z spreads, all within AGREE_SPREADS of each other (so one bad
week that recovers never confirms anything with an ordinary week after it), and, for a dip-sized drop
(every run more than DIP_DROP and OUTLIER_SPREADS spreads down: a bad node or an outage, not a slow
part), three runs, not two: two bad weeks in a row that recover are no level, so no change is alerted
before the third (the verdict still calls the second such run regressed: it is under confirm_floor,
which never calls a lower figure better).

Why a windowed test, these bounds, and what they cannot do: benchmark section 19
(benchmarks/bench_19_small_drops.py). The bounds were chosen on calibration draws (that section's seeds
+ 100, 200 series a row) as the most power at <= 0.08 false alarms per series-year at 1% and 3% noise,
with and without one-week dips; the section reports the held-out draws. A one-sided CUSUM (k = 1 spread,
h sized to the same false-alarm rate) had the same power on a known spread, no more. The physics bound:
a 3% drop at 1% noise, two runs against 52, is t = 4.2 (power 0.9 needs a bound of 2.9); a 2% drop by
its fourth run t = 3.85 (0.8 needs 3.0); a 6% drop at 3% noise by its third run t = 3.4 (0.9 needs 2.1).
Section 19 applies each of those bounds for real (judge_drop's `confirm_z`) and measures: 0.88 of 3%
drops at 0.105 false alarms a series-year, 0.71 of 2% drops (the bound is not what holds them), 0.75 of
6% drops at 3% noise at 0.34 a series-year: no goal inside the 0.1 budget, so CONFIRM_Z stays.
The price of DF_SHORT: a series in its first half-year, and the first months after
each change it alerted, confirms only drops of several spreads.
Issue 63 moved the alert bounds to CONFIRM_Z (3.8; issue 54's are WATCH_CONFIRM_Z): at issue 54's, a
team with 100 series got 8-10 false alerts a year and a third of the alerts on realistic histories were
wrong. A drop a whole cluster shares is caught by pooling its series (bench.analysis.history.pooled).
A drop larger than `regression_tolerance` is a regression whatever the noise (the largest drop a
suite ever tolerates).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bench.errors import ConfigError

# The scale that tells bad weeks from the rest: root mean square of the first differences with the
# largest tenth left out (a step or a bad week in the history is one or two large differences), rescaled
# to a normal standard deviation. The spread itself is the runs' standard deviation around their level
# within OUTLIER_SPREADS of it: as steady as a spread can be (the differences' alone lost 4-8 of 100
# small drops at the same false alarms, and their larger-of-the-two 2-3), and a step inside the history
# leaves out the runs of the far level rather than widening it.
TRIM_KEEP = 0.9
TRIMMED_SQUARE_MEAN = 0.6230  # E[chi2(1) | below its 90% quantile] = P(chi2(3) <= q) / 0.9
# The bounds' Student t has DF_PER_RUN x (n - 1) - DF_SHORT degrees of freedom for a spread from n runs:
# chosen with the bounds on the calibration draws, it widens a short reference's bound most, where a
# lucky quiet stretch gave the false alarms (a fifth of them in weeks 13-25 of two-year series), and
# spends the budget where the spread is known.
DF_PER_RUN = 0.62
DF_SHORT = 8
MIN_NOISE_RUNS = 8  # fewer accepted runs: no noise model (noise_cv empty), the fixed tolerance judges
NOISE_CV_FLOOR = 0.005  # the smallest spread a series is credited with: half a percent week to week
REFERENCE_RUNS = 52  # runs before the newest ones whose mean is the level a drop is measured from
MAX_RUNS = 4  # the longest run of low weeks tested together
WATCH_Z = 2.0  # one run this many standard errors under the level: a suspected drop (`watch`, shown, never sent)
# m runs (the index) this many standard errors under the level confirm a drop that is alerted (issue 63:
# strong evidence only). Each is the tail of a normal z, widened to Student t for the spread estimated
# from the reference (_critical). Chosen on section 12's tuning histories (plain seeds 40-41, realistic
# 100-109) as the lowest bounds holding the alerts to <= 2 false per 100 series-years with E-Divisive's
# counted (docs/benchmarks.md section 12, "Since issue 63"); a 5% drop at 1% noise is 8 standard errors
# by its third run, far past them.
CONFIRM_Z: dict[int, float] = {2: 3.8, 3: 3.8, 4: 3.8}
# Issue 54's bounds, sized for <= 0.1 false alarms per series-year (benchmark section 19): a drop they
# confirm and CONFIRM_Z does not is `watch` (shown with its size, interval and runs; never alerted). A
# team with 100 series would get 8-10 false alerts a year at these; a small drop that is real moves
# the other series of its cluster too, and the pooled test (bench.analysis.history.pooled) alerts it.
WATCH_CONFIRM_Z: dict[int, float] = {2: 2.8, 3: 3.0, 4: 2.8}
# Confirm bounds handed to judge_drop in place of CONFIRM_Z ({runs: z}, runs 2..MAX_RUNS; a number of
# runs left out confirms nothing): benchmark section 19 measures what the power goals' own bounds cost.
ConfirmBounds = Mapping[int, float]
# A reference whose slope is this many standard errors under zero is drifting down, and a drop must also
# stand against its line carried forward (_drift). At 2.0, one stationary year in 40 "drifted" by chance
# and the rule then blocked every drop outright: 4 of 100 3% drops at 1% noise lost (calibration draws,
# seeds 1901-1914: 0.84 confirmed by the second run; at 3.0 with the line test 0.87, false alarms
# unchanged). The drifts that make a drop out of nothing are steep: a slide that puts the newest runs
# one standard error under a 50-run reference's mean has a slope t near 3.
DRIFT_T = 3.0
EACH_Z = 0.5  # every confirming run at least this many one-run standard errors under the level
OUTLIER_SPREADS = 4.0  # a reference run further than this from its median is left out of the level
# The confirming runs lie within this many spreads of each other (times sqrt 2, the spread of a
# difference): a level's runs do (a real step's pair fails 0.3% of the time), a 20% bad week beside an
# ordinary run at 3% noise does not (at 4 spreads it did: 3 of 100 series-years' false alarms).
AGREE_SPREADS = 3.0
# A drop whose every confirming run lies this far down (and OUTLIER_SPREADS spreads) is dip-sized: two
# such runs in a row are as likely a two-week outage as a level, and wait for a third run.
DIP_DROP = 0.08
DIP_RUNS = 3

OK, WATCH, REGRESSED = "ok", "watch", "regressed"


def noise_cv(values) -> float | None:
    """The relative week-to-week spread of a series' accepted runs (oldest first), floored at
    NOISE_CV_FLOOR; None with fewer than MIN_NOISE_RUNS runs (no noise model: the fixed tolerance)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size < MIN_NOISE_RUNS:
        return None
    level = float(np.median(a))
    if level <= 0:
        return None
    squares = np.sort(np.diff(a) ** 2)
    kept = squares[: max(1, math.floor(TRIM_KEEP * squares.size))]
    differences = math.sqrt(float(kept.mean()) / TRIMMED_SQUARE_MEAN / 2) / level
    near = a[np.abs(a / level - 1) <= OUTLIER_SPREADS * max(differences, NOISE_CV_FLOOR)]
    if near.size < MIN_NOISE_RUNS:  # a step in mid-history left too few runs near the median: the differences
        return max(NOISE_CV_FLOOR, differences)
    return max(NOISE_CV_FLOOR, float(near.std(ddof=1)) / level)


@dataclass(frozen=True)
class Drop:
    """The judgement of a series' newest runs against the level before them."""

    status: str  # ok, watch (one run suspected) or regressed (confirmed, or beyond the fixed tolerance)
    runs: int  # how many of the newest runs the judgement rests on (confirmed by `runs` runs)
    size: float  # relative drop of their mean under the level (positive: lower); nan when unjudged
    ci_low: float  # its 95% interval
    ci_high: float
    z: float  # the drop in standard errors
    confidence: float  # one-sided: 1 - p of a drop this large from noise alone
    noise_cv: float | None  # the spread used; None: no noise model (fixed tolerance), too few runs
    level: float  # the reference level

    def as_row(self) -> dict:
        """The result columns (drop_ci_* only on a regressed row)."""
        regressed = self.status == REGRESSED
        return {
            "noise_cv": self.noise_cv,
            "drop_ci_low": self.ci_low if regressed else None,
            "drop_ci_high": self.ci_high if regressed else None,
        }


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def _unjudged(cv: float | None, level: float) -> Drop:
    nan = float("nan")
    return Drop(OK, 0, nan, nan, nan, nan, nan, cv, level)


def check_confirm_bounds(confirm_z: ConfirmBounds) -> dict[int, float]:
    """`confirm_z` as judge_drop uses it, or ConfigError naming the field: keys whole numbers of runs
    2..MAX_RUNS (one run never confirms), values finite z > 0 (a bound of 0 would confirm any wobble)."""
    if not isinstance(confirm_z, Mapping):
        raise ConfigError(f"confirm_z: {confirm_z!r}; must map runs (2..{MAX_RUNS}) to a bound z > 0")
    bounds: dict[int, float] = {}
    for runs, z in confirm_z.items():
        if isinstance(runs, bool) or not isinstance(runs, numbers.Integral) or not 2 <= runs <= MAX_RUNS:
            raise ConfigError(f"confirm_z: runs {runs!r}; must be a whole number 2..{MAX_RUNS}")
        if isinstance(z, bool) or not isinstance(z, numbers.Real) or not (math.isfinite(z) and z > 0):
            raise ConfigError(f"confirm_z[{runs}]: {z!r}; must be a finite number > 0 (standard errors)")
        bounds[int(runs)] = float(z)
    return bounds


def judge_drop(before, newest, tolerance: float | None = None, confirm_z: ConfirmBounds | None = None) -> Drop:
    """Whether the `newest` runs (oldest first, the latest last; at most MAX_RUNS used) dropped under the
    series' level, judged on `before` (the accepted runs before them, oldest first).

    The longest run of newest weeks that confirms a drop at CONFIRM_Z wins (`regressed`, alerted); else
    the longest that confirms one at WATCH_CONFIRM_Z is `watch` with its runs, size and interval (issue
    63: shown, never alerted); else one suspected run is `watch`.
    Without a noise model (fewer than MIN_NOISE_RUNS runs before) only `tolerance` judges: the latest
    run under the median by more than it is `regressed` (as the fixed floor always did).
    `confirm_z` replaces CONFIRM_Z (None: CONFIRM_Z, what the suite uses; other bounds are for benchmark
    section 19, which measures what the power goals' bounds cost in false alarms), widened the same way."""
    bounds = CONFIRM_Z if confirm_z is None else check_confirm_bounds(confirm_z)
    ref = np.asarray(before, dtype=float)
    ref = ref[np.isfinite(ref)][-REFERENCE_RUNS:]
    new = np.asarray(newest, dtype=float)[-MAX_RUNS:]
    if new.size == 0 or not np.isfinite(new).all() or ref.size == 0:
        return _unjudged(None, float("nan"))
    cv = _reference_spread(ref)
    level = _level(ref, cv)
    if level <= 0:
        return _unjudged(cv, level)
    if cv is None:
        size = 1 - float(new[-1]) / level
        beyond = tolerance is not None and size > tolerance
        nan = float("nan")
        return Drop(REGRESSED if beyond else OK, 1, size, nan, nan, nan, nan, None, level)
    n = int(np.sum(_usable(ref, cv)))
    trend = _drift(ref)
    best: Drop | None = None
    watched: Drop | None = None
    for m in range(new.size, 0, -1):
        drop, confirms = _window(new[-m:], ref.size + new.size - m, n, cv, level, trend)
        if confirms(bounds):
            return _with(drop, REGRESSED)
        if watched is None and confirms(WATCH_CONFIRM_Z):
            watched = drop
        if m == 1:
            best = drop
    assert best is not None
    if tolerance is not None and best.size > tolerance:
        return _with(best, REGRESSED)
    if watched is not None:
        return _with(watched, WATCH)
    return _with(best, WATCH if best.z >= _critical(WATCH_Z, n, 0.0) else OK)


def _window(runs: np.ndarray, first: int, n: int, cv: float, level: float, trend: _Trend | None):
    """(the drop of the newest `runs` (the first of them `first` runs after the reference's oldest) under
    the reference level, whether it confirms at given bounds):
    z past the bound for len(runs) runs, every run at least EACH_Z down, the runs agreeing, not
    dip-sized, and against a drifting reference's line carried forward too."""
    m = runs.size
    size = 1 - float(runs.mean()) / level
    se = cv * math.sqrt(1 / m + 1 / n)
    z = size / se
    drop = Drop(OK, m, size, size - 1.96 * se, size + 1.96 * se, z, 1 - _normal_sf(z), cv, level)
    least = 1 - runs.max() / level  # the drop of the least low run
    each = least / (cv * math.sqrt(1 + 1 / n))
    # The confirming runs agree with each other: a bad week beside an ordinary one is no level.
    agree = (runs.max() - runs.min()) / level <= AGREE_SPREADS * cv * math.sqrt(2)
    dip = m < DIP_RUNS and least > _dip_drop(cv)
    shape = each >= EACH_Z and agree and not dip

    def confirms(bounds: ConfirmBounds) -> bool:
        critical = _critical(bounds[m], n) if m in bounds else math.inf
        if not (shape and z >= critical):
            return False
        # A drifting reference: the drop must stand against its line carried forward too.
        return trend is None or _trend_z(trend, runs, first, n) >= critical

    return drop, confirms


@dataclass(frozen=True)
class _Trend:
    """A reference's least-squares line: its value at the reference's centre, its slope per run, the
    centre's position, the sum of squared positions about it (for the line's extrapolation error) and the
    runs' relative spread about the line (a drift widens their spread about their mean: at 10% a year a
    40-run reference's 1% series reads 2.4%)."""

    centre: float
    slope: float
    at: float
    sxx: float
    cv: float

    def level(self, first: int, m: int) -> tuple[float, float]:
        """(the line's mean over runs first..first+m-1, that mean's distance from the centre in runs)."""
        offset = first + (m - 1) / 2 - self.at
        return self.centre + self.slope * offset, offset


def _drift(ref: np.ndarray) -> _Trend | None:
    """The reference's trend where it slides down (least-squares slope's t under -DRIFT_T), else None.
    A drift is no step: measured against its own mean, the newest runs of a 10%-a-year slide look like a
    drop (benchmark section 12's drifting series: 0.15 false alarms per series-year without a drift
    rule). So a drifting reference's drop must also stand against its line carried forward (_trend_z).
    Blocking a drifting reference outright, as the first rule did, cost 4 of 100 3% drops at 1% noise
    (benchmark section 19): a stationary year of 50 runs slides by chance at t < -2 one time in 40, and
    more often once the newest runs drop (issue 54 calibration, seeds 1901-1914)."""
    if ref.size < MIN_NOISE_RUNS:
        return None
    x = np.arange(ref.size, dtype=float)
    at = float(x.mean())
    x -= at
    sxx = float(x @ x)
    slope = float(x @ (ref - ref.mean()) / sxx)
    resid = ref - ref.mean() - slope * x
    se = math.sqrt(float(resid @ resid) / (ref.size - 2) / sxx)
    if not (se > 0 and slope / se < -DRIFT_T):
        return None
    cv = max(NOISE_CV_FLOOR, math.sqrt(float(resid @ resid) / (ref.size - 2)) / float(ref.mean()))
    return _Trend(float(ref.mean()), slope, at, sxx, cv)


def _drifting_down(ref: np.ndarray) -> bool:
    """Whether the reference runs slide down (see _drift)."""
    return _drift(ref) is not None


def _trend_z(trend: _Trend, runs: np.ndarray, first: int, n: int) -> float:
    """The drop of `runs` (the reference's runs first.. on, counted from its oldest) under the drifting
    reference's line carried forward, in standard errors of the spread about the line (the line's
    extrapolation error included)."""
    line, offset = trend.level(first, runs.size)
    if line <= 0:
        return float("inf")
    se = trend.cv * math.sqrt(1 / runs.size + 1 / n + offset**2 / trend.sxx)
    return (1 - float(runs.mean()) / line) / se


def _dip_drop(cv: float) -> float:
    """The drop beyond which a run is dip-sized for a series of spread `cv` (see DIP_DROP)."""
    return max(DIP_DROP, OUTLIER_SPREADS * cv)


@functools.lru_cache(maxsize=4096)
def _critical(z: float, runs: int, short: float = DF_SHORT) -> float:
    """The bound a drop's z must pass when the spread is itself estimated from `runs` runs: the Student t
    quantile of the same tail (DF_PER_RUN, less `short`: DF_SHORT for a confirmed drop, 0 for `watch`,
    which is shown and never sent, so a half-year-old series still shows a suspected 3% drop). Without
    it a lucky quiet stretch of 15 runs read a 2.6% series as 1.9% and called a 5% pair of ordinary
    weeks a regression."""
    from scipy.stats import norm, t

    return float(t.ppf(norm.cdf(z), max(2.0, DF_PER_RUN * (runs - 1) - short)))


def split(history) -> tuple[np.ndarray, np.ndarray]:
    """(before, recent) of a series' accepted runs (oldest first) ahead of its next run: the newest
    MAX_RUNS - 1 runs may confirm a drop with it; the runs before them are the reference."""
    a = np.asarray(history, dtype=float)
    a = a[np.isfinite(a)]
    keep = MAX_RUNS - 1
    return a[:-keep] if a.size > keep else a[:0], a[-keep:]


def next_judgement(history, value: float, tolerance: float | None = None) -> Drop:
    """judge_drop of a series' next run `value` with the runs of `history` (accepted, oldest first)."""
    before, recent = split(history)
    return judge_drop(before, [*recent, value], tolerance)


def confirm_floor(history) -> tuple[float | None, float | None]:
    """(floor, noise_cv) for a series' next run: the highest figure at which judge_drop confirms a drop
    with the newest runs of `history` (accepted, oldest first; at least two runs together, each under the
    level, agreeing); a run under it is regressed. floor None: no run can confirm one yet (the newest
    runs are not low, or there is no noise model: noise_cv None). A run lower than the agreeing range is
    regressed too (the verdict never calls a lower figure better), where judge_drop, which looks at the
    weeks around it, waits for the week after to tell a bad week from a level."""
    before, recent = split(history)
    cv = _reference_spread(before[np.isfinite(before)])
    if cv is None:
        return None, None
    ref = before[np.isfinite(before)][-REFERENCE_RUNS:]
    trend = _drift(ref)
    level, n = _level(before, cv), int(np.sum(_usable(before, cv)))
    if level <= 0:
        return None, cv
    one = cv * math.sqrt(1 + 1 / n)
    each = level * (1 - EACH_Z * one)
    agree = AGREE_SPREADS * cv * math.sqrt(2) * level
    dip = level * (1 - _dip_drop(cv))
    floor = None
    for m in CONFIRM_Z:
        others = recent[len(recent) - (m - 1) :] if m > 1 else recent[:0]
        if others.size != m - 1 or (others.size and (others.max() > each or np.ptp(others) > agree)):
            continue
        mean_bound = m * level * (1 - _critical(CONFIRM_Z[m], n) * cv * math.sqrt(1 / m + 1 / n)) - others.sum()
        high = min(mean_bound, each, float(others.min()) + agree)
        if trend is not None:  # a drifting reference: the drop must stand against its line too
            line, offset = trend.level(ref.size + len(recent) + 1 - m, m)
            se = trend.cv * math.sqrt(1 / m + 1 / n + offset**2 / trend.sxx)
            high = min(high, m * line * (1 - _critical(CONFIRM_Z[m], n) * se) - others.sum())
        low = float(others.max()) - agree
        if m < DIP_RUNS and others.size and others.max() < dip:  # the pair would be dip-sized below this
            low = max(low, dip)
        if high >= low:
            floor = high if floor is None else max(floor, high)
    return floor, cv


def _reference_spread(ref: np.ndarray) -> float | None:
    """noise_cv of a reference, or None (no noise model: the fixed tolerance judges) where fewer than
    MIN_NOISE_RUNS of its runs lie within OUTLIER_SPREADS of its median: a reference split between two
    levels (a step E-Divisive has not cut yet) has no level to measure a drop from, and its mean of no
    runs divided a drop by zero (a ZeroDivisionError in the verdict's judgement)."""
    cv = noise_cv(ref)
    if cv is not None and int(np.sum(_usable(ref, cv))) < MIN_NOISE_RUNS:
        return None
    return cv


def _usable(ref: np.ndarray, cv: float) -> np.ndarray:
    median = float(np.median(ref))
    return np.abs(ref / median - 1) <= OUTLIER_SPREADS * cv if median > 0 else np.ones(ref.size, dtype=bool)


def _level(ref: np.ndarray, cv: float | None) -> float:
    """The reference level: the median without a noise model, else the mean of the runs within
    OUTLIER_SPREADS spreads of the median (as steady as a mean, as robust as a median to a bad week)."""
    if cv is None:
        return float(np.median(ref))
    return float(ref[_usable(ref, cv)].mean())


def _with(drop: Drop, status: str) -> Drop:
    from dataclasses import replace

    return replace(drop, status=status)
