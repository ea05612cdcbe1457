"""Change points in weekly history, per series, that a channel can be alerted with.

One-week outliers (a bad node, a busy storage week: a run far from the runs either side of it) are
set aside first and listed on their own (`outliers`): kept in, a 30% dip is evidence about the noise
that masks or delays every step near it. Levels are medians and the noise is a MAD, so what remains
of a rough week cannot move them much either.

Candidates come from Apache Otava's E-Divisive (windowed, with its t-test). On its own it flags every
statistically real difference, and weekly benchmark series have many that nobody should be paged
for: a slow drift cut into steps, a one-week outlier, a 2% wobble that long segments make
"significant". A candidate is kept only if the level right before and right after it (medians of up
to `local_runs` runs, robust to one outlier) differs by at least `min_change` and by at least
`noise_multiple` times the series' own week-to-week noise, with `min_runs` runs on each side, and its
two segments still differ at `max_pvalue`. The weakest failing candidate goes first and its neighbours
are judged again, as in Otava's merge step. The parameters are tuned on labelled histories
(benchmarks/labelled_history.py, a fixture of the benchmark and the tests, not of the package);
benchmarks/RESULTS.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import islice
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from bench.errors import ConfigError, ResultsInputError

if TYPE_CHECKING:
    from bench.analysis.history.noise import ConfirmBounds

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


@dataclass(frozen=True)
class DetectorSettings:
    max_pvalue: float = 0.001
    window: int = 30  # Otava's sliding window, in runs
    min_change: float = 0.04  # relative; smaller steps are never alerted
    noise_multiple: float = 2.0  # a step must be this many times the series' own run-to-run noise
    local_runs: int = 8  # runs each side whose medians measure the step (a drift moves them little)
    min_runs: int = 3  # runs each side before a change is confirmed (a one-run outlier is no step)
    # A level newer than `local_runs` runs is tested again at every weekly run: a stricter p-value keeps
    # those repeated tests from adding up to false alarms (multiple testing over the weeks).
    new_level_max_pvalue: float = 0.0002
    new_level_noise_multiple: float = 2.0
    new_level_min_runs: int = 2  # a new level is flagged after 2 runs and confirmed by a third (see confirmed)
    # The same new level is tested again every week until it has `local_runs` runs: its p-value bound
    # shrinks as (new_level_min_runs / runs after) ** new_level_spend, spending the false-alarm rate
    # over those repeated looks (0: the same bound at every look).
    new_level_spend: float = 2.0
    # A run further than this from the level of the runs either side of it (both, on the same side) is
    # a one-week outlier, not a segment: the larger of `outlier_noise_multiple` times the series' noise
    # and `outlier_min_change`, relative. Each side's level is the median of up to `outlier_runs` runs
    # not set aside: 1, the nearest; 3 took a regression fixed three runs later for three outliers.
    outlier_noise_multiple: float = 4.0
    outlier_min_change: float = 0.08
    outlier_runs: int = 1
    # The runs before a cut are measured around their Theil-Sen trend only where the slope's interval at
    # this confidence excludes zero: a trend fitted to flat runs extrapolates its own noise into every
    # step measured from it (a 9.9% step read as 6.8%, under twice the 4.0% noise estimated for its
    # series, and never alerted), and most series are flat.
    trend_confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 0 < self.trend_confidence < 1:  # scipy's interval needs a share: 95 would turn the rule off
            raise ConfigError(f"trend_confidence: {self.trend_confidence!r}; must be between 0 and 1 (e.g. 0.95)")


DEFAULT_SETTINGS = DetectorSettings()
# A change found again within this many runs of where it was seen (same direction) is the same change:
# the first runs at a new level place it a few runs off, and a later, better placed estimate must
# refine that alert, not send another (3 sent 1 in 8 of the tuning set's false alarms).
MATCH_RUNS = 5


@dataclass(frozen=True)
class Step:
    index: int  # the first run at the new level
    before: float  # mean of the segment before (to the previous change point)
    after: float
    change: float  # after / before - 1
    pvalue: float  # Student's t-test of the runs either side, around their trend (see _judge)
    # The step where it happened, relative to the level just before: the median of the first runs after
    # it against the level before it (its trend extended, where it has one). Segment means mislead inside
    # a drift or over a later, missed change (a 7% drop in a 9%-a-year climb has equal means), so
    # direction and headline use this.
    size: float = float("nan")
    # How sure: 1 - p of the test that found it (E-Divisive's t-test, or the noise model's drop test), and
    # how many runs at the new level confirmed it (0: not counted, the established-level test).
    confidence: float = float("nan")
    runs: int = 0
    drop_ci: tuple[float, float] = (float("nan"), float("nan"))  # the noise model's 95% interval of the drop

    def __post_init__(self) -> None:
        if self.confidence != self.confidence:  # nan: the t-test's own p-value says it
            object.__setattr__(self, "confidence", 1 - self.pvalue)


def series_noise(values: np.ndarray) -> float:
    """Relative run-to-run noise from the median absolute first difference: steps and drifts barely move it."""
    if len(values) < 3:
        return 0.0
    diffs = np.diff(values)
    mad = np.median(np.abs(diffs - np.median(diffs)))
    level = np.median(np.abs(values))
    return float(1.4826 * mad / np.sqrt(2) / level) if level > 0 else 0.0


def _judge(values: np.ndarray, cuts: list[int], j: int, noise: float, s: DetectorSettings) -> tuple[float, Step]:
    """(margin, step) for cut j: margin >= 1 passes every rule; the smallest margin fails first.

    The runs before the cut (up to `window`, back to the previous cut) give the level and, with 15 or
    more and a slope clear of zero (`trend_confidence`), its robust Theil-Sen trend; the first
    `local_runs` runs after it are measured against that line extended. So a slow drift is not a step,
    and a step inside a drift is measured from the drift.
    The step is the median residual after (one outlier does not make it); its p-value is Student's
    t-test of the residuals before against those after.
    """
    from scipy.stats import theilslopes, ttest_ind

    i = cuts[j]
    lo = cuts[j - 1] if j > 0 else 0
    hi = cuts[j + 1] if j + 1 < len(cuts) else len(values)
    start = max(lo, i - s.window)
    before_idx, after_idx = np.arange(start, i), np.arange(i, min(hi, i + s.local_runs))
    slope, intercept = 0.0, float(np.median(values[before_idx]))
    if len(before_idx) >= s.window // 2:  # a trend of fewer runs extrapolates its own noise
        fitted, at_zero, low, high = theilslopes(values[before_idx], before_idx, alpha=s.trend_confidence)
        if low > 0 or high < 0:
            slope, intercept = fitted, at_zero
    level = intercept + slope * i
    resid_before = values[before_idx] - (intercept + slope * before_idx)
    resid_after = values[after_idx] - (intercept + slope * after_idx)
    size = float(np.median(resid_after)) / level if level > 0 else 0.0
    local = abs(size)
    pvalue = 1.0
    if min(len(resid_before), len(resid_after)) >= 2:
        pvalue = float(ttest_ind(resid_before, resid_after).pvalue)
        if not np.isfinite(pvalue):  # constant runs either side: any difference is certain
            pvalue = 0.0 if resid_before.mean() != resid_after.mean() else 1.0
    before, after = float(values[lo:i].mean()), float(values[i:hi].mean())
    step = Step(i, before, after, after / before - 1 if before else float("nan"), pvalue, size)
    new_level = hi - i < s.local_runs
    new_level_p = (
        s.new_level_max_pvalue * (s.new_level_min_runs / max(hi - i, s.new_level_min_runs)) ** s.new_level_spend
    )
    margins = [
        local / max(s.min_change, (s.new_level_noise_multiple if new_level else s.noise_multiple) * noise),
        min((i - lo) / s.min_runs, (hi - i) / (s.new_level_min_runs if hi == len(values) else s.min_runs)),
        (new_level_p if new_level else s.max_pvalue) / pvalue if pvalue > 0 else float("inf"),
    ]
    return min(margins), step


def outliers(values, settings: DetectorSettings = DEFAULT_SETTINGS) -> list[int]:
    """Indexes of the one-week outliers of a series: runs far from both neighbours' level, on one side.

    A bad node or a busy storage week drops one run by 20-35%. Kept in, such a run is evidence about the
    noise: it widens the t-test of every cut near it and holds a real step back for weeks. A step
    stays at its new level, so its first run is close to the runs after it and is never set aside. The
    newest run has no run after it and is never an outlier yet: the weekly check sets a dip aside the
    week after it (the regression floor alerts the dip itself). Levels are medians of the runs not set
    aside, so two outliers in a row are both set aside.
    """
    values = np.asarray(values, dtype=float)
    n, k = len(values), settings.outlier_runs
    if n < 3:
        return []
    rel = max(settings.outlier_noise_multiple * series_noise(values), settings.outlier_min_change)
    # Only runs far from the level after them (median of up to k runs, all runs at once) can be outliers.
    after = np.lib.stride_tricks.sliding_window_view(np.r_[values[1:], np.full(k, np.nan)], k)[: n - 1]
    right = np.nanmedian(after, axis=1)
    candidates = [int(i) for i in np.flatnonzero(np.abs(values[: n - 1] - right) > rel * np.abs(right))]
    out: set[int] = set()

    def level(runs) -> float | None:
        kept = list(islice((j for j in runs if j not in out), k))
        return float(np.median(values[kept])) if kept else None

    def beyond(i: int) -> float:
        """How far run i lies beyond both levels, relative; 0 if it lies between them."""
        after = level(range(i + 1, n))  # never None: the newest run is never set aside
        before = level(range(i - 1, -1, -1))
        before = after if before is None else before  # the first run kept: judged by the runs after it
        off_before, off_after = values[i] / before - 1, values[i] / after - 1
        return min(abs(off_before), abs(off_after)) if off_before * off_after > 0 else 0.0

    # The farthest first: a dip right after a step's first run makes that run look high against the
    # dip; once the dip is set aside, the run is level with the runs after it.
    while candidates:
        far, i = max((beyond(i), i) for i in candidates)
        if far <= rel:
            break
        out.add(i)
        candidates.remove(i)
    return sorted(out)


def find_steps(values, settings: DetectorSettings = DEFAULT_SETTINGS) -> list[Step]:
    """The change points of one series, oldest first; one-week outliers (`outliers`) are set aside
    first, and each step's index is that of the series given."""
    values = np.asarray(values, dtype=float)
    aside = outliers(values, settings)
    if not aside:
        return _find_steps(values, settings)
    kept = np.setdiff1d(np.arange(len(values)), aside)
    return [replace(step, index=int(kept[step.index])) for step in _find_steps(values[kept], settings)]


def _find_steps(values: np.ndarray, settings: DetectorSettings) -> list[Step]:
    from otava.analysis import compute_change_points

    if len(values) < 2 * settings.min_runs:
        return []
    candidates, _ = compute_change_points(values.tolist(), window_len=settings.window, max_pvalue=settings.max_pvalue)
    cuts = {c.index for c in candidates}
    # E-Divisive rarely splits off a window's last few runs: the newest level is a candidate of its own,
    # or a weekly run would wait many weeks for an alert the data already supports.
    tail = len(values) - settings.new_level_min_runs
    if not any(abs(c - tail) <= settings.min_runs for c in cuts):
        cuts.add(tail)
    cuts = sorted(cuts)
    noise = series_noise(values)
    while cuts:
        judged = [_judge(values, cuts, j, noise, settings) for j in range(len(cuts))]
        worst = min(range(len(cuts)), key=lambda j: judged[j][0])
        if judged[worst][0] >= 1:
            return [step for _, step in judged]
        del cuts[worst]
    return []


def same_change(index_a: int, size_a: float, index_b: int, size_b: float, match_runs: int = MATCH_RUNS) -> bool:
    """Two sightings of one change: at the same run, or near and going the same way (a regression and
    its fix three runs later are two changes)."""
    return index_a == index_b or (abs(index_a - index_b) <= match_runs and (size_a > 0) == (size_b > 0))


def _same(a: Step, b: Step, match_runs: int) -> bool:
    return same_change(a.index, a.size, b.index, b.size, match_runs)


def confirmed(now: list[Step], before: list[Step], match_runs: int = MATCH_RUNS) -> list[Step]:
    """The change points of the latest history that the history without its latest run also showed.

    A change seen once can be the newest run's noise; seen by two runs in a row it is confirmed. The
    weekly DAG alerts on these, so one noisy week does not page anyone."""
    return [step for step in now if any(_same(step, old, match_runs) for old in before)]


def is_news(index: int, runs: int, settings: DetectorSettings = DEFAULT_SETTINGS) -> bool:
    """Whether a change point first confirmed when the series has `runs` runs is sent to a channel.

    Only the new-level test (fewer than `local_runs` runs at the new level) spends its false-alarm rate
    over the weekly looks. A change that first passes once its level is established passed the offline
    test, which every later week repeats at the same bound: alerting those sent more than half of the
    false alarms of the held-out histories (docs/benchmarks.md section 12). They are recorded for the
    dashboard, as is history older than this check.
    """
    return runs - index < settings.local_runs


@dataclass
class Flagged:
    """A confirmed change point as the weekly runs saw it: first confirmed at one run, refined after."""

    step: Step
    flagged_at: int  # index of the run whose result confirmed it
    last_seen: int
    alerted: bool = True  # sent when first confirmed (is_news); otherwise only recorded


# One-week outliers for the noise model's drop test: a run 4 spreads off both neighbours' level (no 8%
# minimum: at 1% noise a 6% bad week would otherwise sit in a reference and in a confirming pair).
DROP_OUTLIERS = DetectorSettings(outlier_min_change=0.0)


def latest_drop(values, since: int = 0, confirm_z: ConfirmBounds | None = None):
    """The noise model's judgement (bench.analysis.history.noise.Drop) of the newest runs of a series
    (oldest first) against the runs from `since` (the first run of the current level) before them, one-week
    outliers set aside; and the index of the first run the drop rests on. None where the level has too few
    runs for the noise model (the fixed floor judges those). `confirm_z`: noise.judge_drop's."""
    from bench.analysis.history import noise

    values = np.asarray(values, dtype=float)[since:]
    aside = set(outliers(values, DROP_OUTLIERS))
    idx = [i for i in range(len(values)) if i not in aside]
    if len(idx) < noise.MIN_NOISE_RUNS + 1:
        return None
    kept = values[idx]
    k = min(noise.MAX_RUNS, len(kept) - noise.MIN_NOISE_RUNS)
    drop = noise.judge_drop(kept[:-k], kept[-k:], confirm_z=confirm_z)
    return drop, since + idx[len(kept) - max(drop.runs, 1)]


def drop_step(values, since: int = 0, confirm_z: ConfirmBounds | None = None) -> Step | None:
    """A drop the noise model confirms on the newest runs (two or more at the new level), as a Step
    (`confirm_z`: noise.judge_drop's)."""
    from bench.analysis.history import noise

    found = latest_drop(values, since, confirm_z)
    if found is None or found[0].status != noise.REGRESSED:
        return None
    drop, at = found
    values = np.asarray(values, dtype=float)
    after = float(values[at:].mean())
    p = 1 - drop.confidence
    ci = (drop.ci_low, drop.ci_high)
    return Step(at, drop.level, after, after / drop.level - 1, p, -drop.size, drop.confidence, drop.runs, ci)


def weekly_steps(values, settings: DetectorSettings = DEFAULT_SETTINGS) -> list[list[Step]]:
    """E-Divisive's change points (find_steps) of each history the weekly runs saw, values[:1],
    values[:2], ...: replay's costly half, computed once where two replays of a series share it."""
    values = np.asarray(values, dtype=float)
    return [find_steps(values[:t], settings) for t in range(1, len(values) + 1)]


def replay(
    values,
    settings: DetectorSettings = DEFAULT_SETTINGS,
    match_runs: int = MATCH_RUNS,
    noise_model: bool = True,
    steps: list[list[Step]] | None = None,
    confirm_z: ConfirmBounds | None = None,
) -> list[Flagged]:
    """Run the detector after every run, as the weekly DAG does; a change confirmed again within
    `match_runs` of where it was first confirmed is the same change, not a new alert.

    Two tests look each week: E-Divisive (find_steps, confirmed by the next run's history) and the noise
    model's drop test on the runs since the last change (drop_step: confirmed by its own second run);
    `noise_model` False leaves the second out (benchmark section 19 compares the two, on the same
    `steps`: weekly_steps of these values and settings, computed here when not given). `confirm_z`
    replaces the drop test's confirm bounds (noise.judge_drop; None: noise.CONFIRM_Z, what the suite
    sends on); section 19 measures the power goals' own bounds with it."""
    if confirm_z is not None:
        from bench.analysis.history.noise import check_confirm_bounds

        confirm_z = check_confirm_bounds(confirm_z)  # refused before the replay, not at its first drop
    values = np.asarray(values, dtype=float)
    steps = weekly_steps(values, settings) if steps is None else steps
    if len(steps) != len(values):
        raise ValueError(f"steps: one list per run wanted ({len(values)}), got {len(steps)}")
    flagged: list[Flagged] = []
    previous: list[Step] = []
    for t in range(1, len(values) + 1):
        current = steps[t - 1]
        found = confirmed(current, previous, match_runs)
        since = max((f.step.index for f in flagged), default=0)
        drop = drop_step(values[:t], since, confirm_z) if noise_model else None
        if drop is not None and not any(_same(drop, step, match_runs) for step in found):
            found = [*found, drop]
        for step in found:
            near = [f for f in flagged if _same(f.step, step, match_runs)]
            if near:
                seen = min(near, key=lambda f: abs(f.step.index - step.index))
                seen.step, seen.last_seen = step, t - 1
            else:
                flagged.append(Flagged(step, t - 1, t - 1, is_news(step.index, t, settings)))
        previous = current
    return flagged


def replay_watches(values, flagged: list[Flagged], match_runs: int = MATCH_RUNS) -> list[tuple[int, int, object]]:
    """The drops the noise model confirmed at its watch bounds only (noise.WATCH_CONFIRM_Z, two runs or
    more; issue 63: shown with their size and interval, never alerted) as the weekly runs saw them, each
    once: (index of its first run, index of the run that first saw it, its noise.Drop). A drop that was
    also flagged (`flagged`: replay's, of the same values) is that change, not a watch."""
    from bench.analysis.history import noise

    values = np.asarray(values, dtype=float)
    out: list[tuple[int, int, object]] = []
    for t in range(1, len(values) + 1):
        since = max((f.step.index for f in flagged if f.flagged_at < t), default=0)
        found = latest_drop(values[:t], since)
        if found is None or found[0].status != noise.WATCH or found[0].runs < 2:
            continue
        drop, at = found
        seen = [(f.step.index, f.step.size) for f in flagged] + [(i, -1.0) for i, _, _ in out]
        if not any(same_change(i, size, at, -1.0, match_runs) for i, size in seen):
            out.append((at, t - 1, drop))
    return out


def replay_outliers(values, settings: DetectorSettings = DEFAULT_SETTINGS) -> dict[int, int]:
    """{index of a run set aside: index of the run that first set it aside}, as the weekly runs saw it;
    a run set aside and later taken back (the start of a level after all) is left out."""
    values = np.asarray(values, dtype=float)
    first: dict[int, int] = {}
    for t in range(3, len(values) + 1):
        for i in outliers(values[:t], settings):
            first.setdefault(i, t - 1)
    final = set(outliers(values, settings))
    return {i: at for i, at in first.items() if i in final}


def _series(history: pd.DataFrame, metric: str):
    for (model, gpus), group in history.sort_values("timestamp").groupby(["model", "gpus"], sort=True):
        group = group[group[metric].notna()]
        yield str(model), int(gpus), group[metric].to_numpy(dtype=float), group["timestamp"].tolist()


def _row(model: str, gpus: int, stamps: list, step: Step) -> dict:
    return {
        "model": model,
        "gpus": gpus,
        "timestamp": stamps[step.index].isoformat(),
        "before": step.before,
        "after": step.after,
        "change": step.change,
        "pvalue": step.pvalue,
        "confidence": step.confidence,
    }


def change_points(history: pd.DataFrame, metric: str, settings: DetectorSettings = DEFAULT_SETTINGS) -> list[dict]:
    """Every change point of every (model, gpus) series, on the whole history."""
    return [
        _row(model, gpus, stamps, step)
        for model, gpus, values, stamps in _series(history, metric)
        for step in find_steps(values, settings)
    ]


def online_change_points(
    history: pd.DataFrame, metric: str, settings: DetectorSettings = DEFAULT_SETTINGS
) -> list[dict]:
    """The history replayed run by run: each change point with `detected_at`, the run that first flagged
    it, `confirmed` (false for one a later run no longer shows: an alert that was noise) and `alerted`
    (false for one the weekly check records without sending, is_news)."""
    out = []
    for model, gpus, values, stamps in _series(history, metric):
        last = len(values) - 1
        for f in replay(values, settings):
            out.append(
                _row(model, gpus, stamps, f.step)
                | {
                    "detected_at": stamps[f.flagged_at].isoformat(),
                    "confirmed": f.last_seen == last,
                    "alerted": f.alerted,
                }
            )
    return out


def outlier_points(
    history: pd.DataFrame, metric: str, settings: DetectorSettings = DEFAULT_SETTINGS, online: bool = False
) -> list[dict]:
    """The one-week outliers of every (model, gpus) series: never change points, marked on their own.

    Each row has model, gpus, timestamp and value; with `online`, also `detected_at`, the run that
    first set it aside (the week after it: the newest run cannot be told from the start of a step)."""
    out = []
    for model, gpus, values, stamps in _series(history, metric):
        found = replay_outliers(values, settings) if online else dict.fromkeys(outliers(values, settings))
        for i, at in sorted(found.items()):
            row = {"model": model, "gpus": gpus, "timestamp": stamps[i].isoformat(), "value": float(values[i])}
            out.append(row | ({"detected_at": stamps[at].isoformat()} if online else {}))
    return out
