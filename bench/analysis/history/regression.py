"""The regression floor: a drop is called only where the series' own run-to-run noise can resolve it.

A week's figure is compared with the median of the last K accepted runs of the same series. On a
noisy machine (this 2-core box: SSD 2-rank images/s ranged 136-183 over six back-to-back sweeps) a
fixed 10% tolerance alarms on noise every few weeks. So the tolerance used is the larger of the
configured one and k times the history's robust spread (1.4826 x MAD / median, a standard deviation
estimate that one outlier week cannot inflate), and a series is judged only once it has MIN_HISTORY
accepted runs to estimate that spread from. The report shows the tolerance used per row.

k is the 97.5% prediction bound for one new run from n past ones, t(0.975, n-1) x sqrt(1 + 1/n), as
Bencher's t-test thresholds size theirs: a spread estimated from three runs is itself uncertain
(benchmark section 8: three fio ceilings within 4% of each other, then a fourth 10.6% under their
median on the same disk), so k is 5.0 at three runs, 2.5 at eight and tends to 1.96.

A floor at that bound is still crossed by noise about once in 40 looks per series, and a
suite looks at every series every week (the embedded default's four: one false regression in about
ten runs; benchmark section 8 saw one in 20). So a scale under its floor is run once more (the REPEAT
variant, after every scale has ended) and the check takes the better of the two: a regression is
called only when both runs fall under the floor. A slower system is slow twice; noise rarely is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MIN_HISTORY = 3
# Accepted runs a series' history is read with: the noise model's reference and the runs that may confirm
# a drop with the next one (noise.REFERENCE_RUNS + noise.MAX_RUNS - 1); the fixed floor uses the newest
# `history_runs` of them.
NOISE_HISTORY_RUNS = 55
PREDICTION = 0.975  # one-sided: about one look in 40 of a steady normal series falls under the floor


def history_stats(values: list[list[float]], index: pd.Index, window: int | list[int] | None = None) -> pd.DataFrame:
    """Median, count and spread of each row's past accepted runs (oldest first): of the last `window` of
    them where given (the suite's `history_runs`), the fixed floor's; `history_values` keeps them all for
    the noise model (bench.analysis.history.noise), which reads a longer reference."""
    rows = []
    windows = window if isinstance(window, list) else [window] * len(values)
    for v, w in zip(values, windows, strict=True):
        full = np.asarray(v, dtype=float)
        a = full[-w:] if w else full
        median = float(np.median(a)) if a.size else np.nan
        spread = float(1.4826 * np.median(np.abs(a - median)) / median) if a.size >= 2 and median > 0 else np.nan
        rows.append(
            {"history_median": median, "history_n": int(a.size), "history_spread": spread, "history_values": full}
        )
    columns = ["history_median", "history_n", "history_spread", "history_values"]
    return pd.DataFrame(rows, index=index, columns=columns)


def noise_factor(n: pd.Series) -> pd.Series:
    """k per series: the prediction bound's width in spreads for one new run from `n` past runs."""
    from scipy.stats import t

    runs = n.astype(float).where(n >= 2)
    return pd.Series(t.ppf(PREDICTION, runs - 1) * np.sqrt(1 + 1 / runs), index=n.index)


def noise_floors(stats: pd.DataFrame) -> pd.DataFrame:
    """Per row, `noise_cv` (the series' spread; NaN: too few runs for the noise model, the fixed floor
    alone judges) and `confirm_floor` (the figure under which the next run confirms a drop with the
    newest runs before it, noise.confirm_floor; NaN where none can)."""
    from bench.analysis.history.noise import confirm_floor

    values = stats["history_values"] if "history_values" in stats else pd.Series([[]] * len(stats), index=stats.index)
    pairs = [confirm_floor(v if isinstance(v, np.ndarray | list) else []) for v in values]
    return pd.DataFrame(
        {
            "noise_cv": [np.nan if cv is None else cv for _, cv in pairs],
            "confirm_floor": [np.nan if f is None else f for f, _ in pairs],
        },
        index=stats.index,
        dtype=float,
    )


def regression_floor(stats: pd.DataFrame, tolerance: float) -> tuple[pd.Series, pd.Series]:
    """(floor, tolerance used) per row; NaN where the series has fewer than MIN_HISTORY accepted runs.

    The floor is the higher of the fixed one (the median less the larger of `tolerance` and k spreads:
    what one run may drop) and the noise model's (issue 54: what a run may drop when the runs before it
    already dropped; noise.confirm_floor). The tolerance used is the floor's distance under the median."""
    enough = stats["history_n"] >= MIN_HISTORY
    used = np.maximum(tolerance, noise_factor(stats["history_n"]) * stats["history_spread"].fillna(0.0))
    used = used.where(enough)
    fixed = stats["history_median"] * (1 - used)
    confirm = noise_floors(stats)["confirm_floor"]
    floor = pd.Series(np.fmax(fixed.to_numpy(dtype=float), confirm.to_numpy(dtype=float)), index=stats.index)
    floor = floor.where(enough)
    confirmed = confirm.notna() & (confirm > fixed)
    return floor, used.where(~confirmed, 1 - floor / stats["history_median"]).where(enough)


def series_floor(values: list[float], tolerance: float) -> dict:
    """history_median, history_n, regression_floor and tolerance_used of one series (None where unjudged)."""
    stats = history_stats([values], pd.RangeIndex(1))
    floor, used = regression_floor(stats, tolerance)
    out = {
        **stats.iloc[0].drop("history_values").to_dict(),
        "regression_floor": floor.iloc[0],
        "tolerance_used": used.iloc[0],
    }
    return {k: (None if pd.isna(v) else (int(v) if k == "history_n" else float(v))) for k, v in out.items()}
