"""Two suite runs side by side: per scale, how far each figure moved, its 95% interval, whether that is
outside noise, and what changed in the environment between them.

The interval of a change b/a - 1 comes from each run's own 95% interval (the bootstrap interval the
frame stores for images/s and scaling efficiency): on the log scale a run's half-width is
ln(high/low)/2, the two add in quadrature, and the change's interval is exp(log ratio +- that) - 1.
Where a run was stored without its interval, the series' own run-to-run spread stands in
(`regression.history_stats`: 1.4826 x MAD / median of its recent accepted runs, each run's relative
standard deviation, so 1.96 x sqrt(2) x spread for a difference of two runs); `interval_from` says
which. A difference is outside noise when its interval excludes zero and it is larger than the
tolerance the series' regression floor allows (`regression.series_floor` over the accepted runs up to
the later one's start, with the tolerance and window the later run's config set): the weekly check's
own noise model, not a second one.
"""

from __future__ import annotations

import math

import pandas as pd

from bench.analysis.history.regression import history_stats, series_floor
from bench.env.fingerprint import differences
from bench.results.schema import RUN_ROW, SERIES_KEY

FIGURES = {
    "throughput_img_s": ("throughput_ci_low", "throughput_ci_high"),
    "scaling_efficiency": ("scaling_efficiency_ci_low", "scaling_efficiency_ci_high"),
}
COLUMNS = (
    *RUN_ROW,
    *(c for figure, (low, high) in FIGURES.items() for c in (figure, low, high)),
)
SCALE = SERIES_KEY  # a scale of a run: its series
Z95 = 1.959964


def _log_half(value, low, high) -> float | None:
    if any(v is None or pd.isna(v) or v <= 0 for v in (value, low, high)):
        return None
    return math.log(float(high) / float(low)) / 2


def change(a: dict, b: dict, figure: str, tolerance: float | None, spread: float | None = None) -> dict:
    """One figure's change from run a to run b with its 95% interval and whether it is outside noise."""
    low, high = FIGURES[figure]
    va, vb = a.get(figure), b.get(figure)
    if any(v is None or pd.isna(v) or v <= 0 for v in (va, vb)):
        none = ("a", "b", "delta", "ci_low", "ci_high", "interval_from", "outside_noise")
        return {"figure": figure} | dict.fromkeys(none)
    ratio = math.log(float(vb) / float(va))
    ha, hb = _log_half(va, a.get(low), a.get(high)), _log_half(vb, b.get(low), b.get(high))
    interval, source = (None, None), None
    if ha is not None and hb is not None:
        half, source = math.hypot(ha, hb), "runs"
    elif spread is not None and not pd.isna(spread):
        half, source = Z95 * math.sqrt(2) * float(spread), "history"
    if source is not None:
        interval = (math.exp(ratio - half) - 1, math.exp(ratio + half) - 1)
    delta = math.exp(ratio) - 1
    outside = None
    if interval[0] is not None:
        excludes = interval[0] > 0 or interval[1] < 0
        outside = bool(excludes and (tolerance is None or abs(delta) > tolerance))
    return {
        "figure": figure,
        "a": float(va),
        "b": float(vb),
        "delta": delta,
        "ci_low": interval[0],
        "ci_high": interval[1],
        "interval_from": source,
        "outside_noise": outside,
    }


def _records(rows: pd.DataFrame) -> dict[tuple, dict]:
    out = {}
    for record in rows.to_dict("records"):
        out.setdefault(tuple(record[k] if k != "gpus" else int(record[k]) for k in SCALE), record)
    return out


def compare_runs(
    a: pd.DataFrame,
    b: pd.DataFrame,
    env_a: dict[str, str] | None,
    env_b: dict[str, str] | None,
    history: dict[tuple, list[float]],
    tolerances: dict[tuple, float],
) -> dict:
    """Per scale of either run: both runs' figures and each figure's change. `history`: per scale, the
    accepted images/s up to run b (newest last) that size the series' noise tolerance; `tolerances`: per
    scale of run b, the regression tolerance b's config set for it, read from its stored config (the typed
    reader is the one place a stored config's defaults are filled in): a scale b does not have has none,
    and shows none (no default of this module's own)."""
    ra, rb = _records(a), _records(b)
    scales = []
    for key in sorted(set(ra) | set(rb), key=lambda k: tuple(str(v) for v in k)):
        x, y = ra.get(key, {}), rb.get(key, {})
        given = tolerances.get(key)
        tolerance = None if given is None else series_floor(history.get(key, []), given)["tolerance_used"]
        spread = history_stats([history.get(key, [])], pd.RangeIndex(1))["history_spread"].iloc[0]
        scales.append(
            {
                **dict(zip(SCALE, key, strict=True)),
                "in": "both" if x and y else ("a" if x else "b"),
                "tolerance_used": tolerance,
                "changes": [change(x, y, f, tolerance, spread) for f in FIGURES] if x and y else [],
            }
        )
    known = env_a is not None and env_b is not None
    return {
        "scales": scales,
        "environment_recorded": known,
        "environment_changes": differences(env_a, env_b) if known else [],
    }
