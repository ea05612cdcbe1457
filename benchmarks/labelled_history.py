"""Weekly histories with known truth, and the score of a change-point detector against them.

A detector that alerts a channel must be measured before it is trusted: these series plant steps,
slow drifts, clean stretches, missing weeks and one-week dips (a bad node, a busy storage week) with
the noise of real weekly benchmark figures, so precision, recall and the online delay are counted,
not guessed. The benchmark (section 12) and the detector's tests use them: a fixture, kept out of the
installed package (issue 52).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# A detected change within this many weekly runs of a planted step is that step.
MATCH_WEEKS = 3
# Steps of at least this relative size, in noise at most NOISE_TARGET, are the ones the targets cover.
STEP_TARGET = 0.06
NOISE_TARGET = 0.03
# A one-week dip of real weekly series: a bad node or a busy storage week (issue 27).
DIP_SIZE = (0.20, 0.35)


@dataclass
class LabelledSeries:
    """One (workload, GPUs) series: its values, dates and what was planted in it."""

    name: str
    values: np.ndarray
    timestamps: pd.DatetimeIndex
    noise: float  # relative standard deviation of one weekly figure
    steps: list[tuple[int, float]] = field(default_factory=list)  # (index of first changed run, relative size)
    drift: float = 0.0  # relative change per year over the drifting span (0: none)
    dips: list[tuple[int, float]] = field(default_factory=list)  # (index of a one-week dip, relative size)

    def targeted_steps(self) -> list[tuple[int, float]]:
        return [(i, s) for i, s in self.steps if abs(s) >= STEP_TARGET and self.noise <= NOISE_TARGET]


def labelled_histories(
    n_series: int = 100,
    weeks: int = 156,
    seed: int = 0,
    noise: tuple[float, float] = (0.01, 0.03),
    step_size: tuple[float, float] = (0.05, 0.15),
    missing: float = 0.05,
    start: str = "2023-01-02",
    dips: int = 0,
    dip_size: tuple[float, float] = DIP_SIZE,
) -> list[LabelledSeries]:
    """Series of four kinds: clean (30%), one or two steps (45%), a slow drift (15%), a step inside a drift
    (10%); `dips` one-week dips per series on top (drawn after the rest, so a seed's series are otherwise
    those of `dips=0`)."""
    rng = np.random.default_rng(seed)
    all_weeks = pd.date_range(start, periods=weeks, freq="W-MON", tz="UTC")
    out = []
    for k in range(n_series):
        level = rng.uniform(100, 5000)
        sigma = rng.uniform(*noise)
        kind = rng.choice(["clean", "step", "drift", "step+drift"], p=[0.30, 0.45, 0.15, 0.10])
        keep = np.sort(rng.choice(weeks, size=weeks - round(missing * weeks), replace=False))
        n = len(keep)
        mean = np.full(n, level)
        steps: list[tuple[int, float]] = []
        drift = 0.0
        if "drift" in kind:
            drift = rng.choice([-1, 1]) * rng.uniform(0.03, 0.10)  # per year
            a = int(rng.integers(0, n // 2))
            b = int(rng.integers(a + 26, n + 1)) if a + 26 <= n else n
            years = (np.arange(n) - a).clip(0, b - a) / 52.0
            mean = mean * (1 + drift * years)
        if "step" in kind:
            count = 1 if kind == "step+drift" else int(rng.choice([1, 2]))
            lo, hi = 20, n - 8
            at = sorted(int(x) for x in rng.choice(np.arange(lo, hi), size=count, replace=False))
            if count == 2 and at[1] - at[0] < 20:
                at = at[:1]
            for i in at:
                size = rng.choice([-1, 1]) * rng.uniform(*step_size)
                mean[i:] = mean[i:] * (1 + size)
                steps.append((i, float(size)))
        values = rng.normal(mean, mean * sigma)
        out.append(
            LabelledSeries(f"seed{seed}-s{k:03d}-{kind}", values, all_weeks[keep], float(sigma), steps, float(drift))
        )
    for s in out if dips else ():
        _plant_dips(s, dips, dip_size, rng)
    return out


def _plant_dips(series: LabelledSeries, count: int, size: tuple[float, float], rng: np.random.Generator) -> None:
    """One-week dips anywhere after the first 4 runs, at least 2 runs apart; next to a step is allowed."""
    n = len(series.values)
    spots: list[int] = []
    while len(spots) < count:
        i = int(rng.integers(4, n))
        if all(abs(i - j) > 2 for j in spots):
            spots.append(i)
    for i in sorted(spots):
        depth = float(rng.uniform(*size))
        series.values[i] *= 1 - depth
        series.dips.append((i, -depth))


def realistic_histories(
    n_series: int = 40,
    weeks: int = 104,
    seed: int = 0,
    steps: int = 20,
    drifts: int = 5,
    dips: int = 2,
    noise: tuple[float, float] = (0.015, 0.03),
    step_size: tuple[float, float] = (0.07, 0.15),
    dip_size: tuple[float, float] = DIP_SIZE,
    missing: float = 0.05,
    start: str = "2024-01-01",
) -> list[LabelledSeries]:
    """What real weekly series have (issue 27): `steps` steps spread over the series (one per series, a
    second where there are more steps than series), `drifts` series with a slow drift of 3-10% a year
    over part of them (a step may fall inside one), `dips` one-week dips in every series, `missing` of
    the weeks absent."""
    rng = np.random.default_rng(seed)
    all_weeks = pd.date_range(start, periods=weeks, freq="W-MON", tz="UTC")
    with_step = [k % n_series for k in rng.permutation(max(steps, n_series))[:steps]]
    drifting = set(int(k) for k in rng.choice(n_series, size=min(drifts, n_series), replace=False))
    out = []
    for k in range(n_series):
        level = rng.uniform(100, 5000)
        sigma = rng.uniform(*noise)
        keep = np.sort(rng.choice(weeks, size=weeks - round(missing * weeks), replace=False))
        n = len(keep)
        mean = np.full(n, level)
        drift = 0.0
        if k in drifting:
            drift = rng.choice([-1, 1]) * rng.uniform(0.03, 0.10)
            a = int(rng.integers(0, n // 2))
            b = int(rng.integers(a + 26, n + 1)) if a + 26 <= n else n
            mean = mean * (1 + drift * (np.arange(n) - a).clip(0, b - a) / 52.0)
        planted: list[tuple[int, float]] = []
        for _ in range(with_step.count(k)):
            for _try in range(100):  # at least 20 runs from the start, 8 from the end, 20 from another step
                i = int(rng.integers(20, n - 8))
                if all(abs(i - j) >= 20 for j, _ in planted):
                    break
            else:
                continue
            size = float(rng.choice([-1, 1]) * rng.uniform(*step_size))
            mean[i:] = mean[i:] * (1 + size)
            planted.append((i, size))
        kind = "+".join(["step"] * bool(planted) + ["drift"] * bool(drift)) or "clean"
        series = LabelledSeries(
            f"real{seed}-s{k:03d}-{kind}",
            rng.normal(mean, mean * sigma),
            all_weeks[keep],
            float(sigma),
            sorted(planted),
            float(drift),
        )
        _plant_dips(series, dips, dip_size, rng)
        out.append(series)
    return out


@dataclass
class Score:
    detected: int = 0
    true_positive: int = 0
    targeted: int = 0
    targeted_found: int = 0
    false_alarms: int = 0
    series_years: float = 0.0
    # Weekly runs from a targeted step to its alert (online): 0 is the step's own run, which alone cannot
    # be told from an outlier; 3 is the third run after it.
    delays: list[int] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.true_positive / self.detected if self.detected else 1.0

    @property
    def recall(self) -> float:
        return self.targeted_found / self.targeted if self.targeted else 1.0

    @property
    def false_alarms_per_100_series_years(self) -> float:
        return 100 * self.false_alarms / self.series_years if self.series_years else 0.0

    def within(self, runs: int) -> float:
        """Share of targeted steps alerted at most `runs` weekly runs after the step's own run."""
        return sum(d <= runs for d in self.delays) / self.targeted if self.targeted else 1.0


def score(series: list[LabelledSeries], found: dict[str, list[tuple[int, int]]]) -> Score:
    """`found[name]`: (index of the change, index of the run that flagged it); offline, both the same index.

    A detection matches the nearest unmatched planted step within MATCH_WEEKS (any size: a 5% step found
    is not a false alarm); the rest are false alarms. Targeted steps count toward recall.
    """
    result = Score()
    for s in series:
        result.series_years += len(s.values) / 52.0
        hits = found.get(s.name, [])
        result.detected += len(hits)
        unmatched = dict(s.steps)
        targeted = dict(s.targeted_steps())
        result.targeted += len(targeted)
        for index, flagged_at in sorted(hits, key=lambda h: h[1]):
            near = [i for i in unmatched if abs(i - index) <= MATCH_WEEKS]
            if not near:
                result.false_alarms += 1
                continue
            step = min(near, key=lambda i: abs(i - index))
            del unmatched[step]
            result.true_positive += 1
            if step in targeted:
                result.targeted_found += 1
                result.delays.append(max(0, flagged_at - step))
    return result
