"""Every bound the verdict holds a figure to, and the one comparison of a figure with it.

A bound's value comes from Thresholds (the scaling bound per GPU count from Thresholds.scaling_bound,
the regression floor per series from bench.analysis.history.regression, the measured-time floor per row
from the run's config); which threshold bounds which figure and which way it points (a floor: the figure
must be at or above it; a ceiling: at or below) is declared once, on the columns of the results schema
(bench.results.schema.VERDICT_BOUNDS, which BOUNDS is), and compared here once. The
differential reruns, the row verdicts, the GX suite and the dashboard all ask this module, so a
figure exactly at its bound passes everywhere, and a missing figure or an unset bound is not judged
(it passes, as GX's pair checks ignore a row with either value missing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real

from bench.config.models import Thresholds
from bench.results.schema import VERDICT_BOUNDS, Bound

SCALING_EFFICIENCY = "scaling_efficiency"
BANDWIDTH_EFFICIENCY = "bandwidth_efficiency"
CHECKPOINT_EFFICIENCY = "checkpoint_efficiency"  # checkpoint write and read MB/s per GPU vs the baseline's
GPU_UTIL = "gpu_util"
AU = "au"
SUPPORTED_GPUS = "supported_gpus"
FOREIGN_SHARE = "foreign_share"
STEP_TIME_SPREAD = "step_time_spread"
REGRESSION = "regression"  # images/s (or a checkpoint MB/s) against its series' floor
STRAGGLER_GAP = "straggler_gap"  # a rank's work rate below the ranks' median: above the gap it is named
MEASURED = "measured_s"  # measured seconds against the run's min_measure_s

# The verdict's bounds by name, read from the results schema: {name: Bound(figure, side, threshold)}.
BOUNDS: dict[str, Bound] = VERDICT_BOUNDS


def _number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def scaling_bound(gpus: int, thresholds: Thresholds) -> float:
    """The minimum scaling efficiency at `gpus` (the per-GPU table's entry covering it, else the single one)."""
    return float(thresholds.scaling_bound(int(gpus)))


def bound_at(name: str, thresholds: Thresholds) -> Callable[[int], float | None]:
    """`bound(name, gpus, thresholds)` as a function of the GPU count alone."""
    return lambda gpus: bound(name, gpus, thresholds)


def bound(name: str, gpus: int, thresholds: Thresholds) -> float | None:
    """The bound `name` holds a scale of `gpus` to; None where the suite does not judge it."""
    if name == SCALING_EFFICIENCY:
        return scaling_bound(gpus, thresholds)
    setting = BOUNDS[name].threshold
    if setting is None:
        raise ValueError(f"{name}: the bound is per series or per row; compare with meets(name, value, limit)")
    value = getattr(thresholds, setting)
    return None if value is None else float(value)


def meets(name: str, value, limit) -> bool | None:
    """The one comparison of a figure with its bound's value: True or False, None where either is missing."""
    if not _number(value) or not _number(limit):
        return None
    return bool(value >= limit) if BOUNDS[name].floor else bool(value <= limit)


def passes(name: str, value, gpus: int, thresholds: Thresholds) -> bool:
    """Whether `value` passes bound `name` at `gpus`; a missing value or an unset bound is not judged (True)."""
    return meets(name, value, bound(name, gpus, thresholds)) is not False


def fails(name: str, value, limit) -> bool:
    """The figure is judged and fails its bound (False where either is missing)."""
    return meets(name, value, limit) is False


def straddles(name: str, low, high, limit) -> bool:
    """An interval whose low end fails the bound and whose high end passes it: the row is borderline."""
    return fails(name, low, limit) and meets(name, high, limit) is True


def gx_column(name: str, thresholds: Thresholds) -> dict:
    """A column expectation's limit (ExpectColumnValuesToBeBetween): min_value or max_value, inclusive."""
    limit = bound(name, 0, thresholds)
    return {"min_value": limit} if BOUNDS[name].floor else {"max_value": limit}


def gx_pair(name: str, value_column: str, bound_column: str) -> dict:
    """A pair expectation (ExpectColumnPairValuesAToBeGreaterThanB) of a figure and its per-row bound column."""
    a, b = (value_column, bound_column) if BOUNDS[name].floor else (bound_column, value_column)
    return {"column_A": a, "column_B": b, "or_equal": True, "ignore_row_if": "either_value_is_missing"}
