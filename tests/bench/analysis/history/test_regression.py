"""The regression check through the real GX suite: judged only with enough history, and a drop is
called only where the series' own run-to-run noise can resolve it."""

import pandas as pd
import pytest

from bench.analysis.history.regression import MIN_HISTORY, history_stats
from bench.analysis.verdict.expectations import prepare, validate
from bench.config.models import Thresholds


def frame(throughput: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "workload": ["ssd"],
            "gpus": [2],
            "baseline_gpus": [1],
            "state": ["COMPLETED"],
            "valid": [True],
            "throughput_img_s": [throughput],
            "scaling_efficiency": [0.9],
            "bandwidth_efficiency": [float("nan")],
            "avg_read_mb_s": [float("nan")],
            "bandwidth_valid": [True],
            "inconclusive_reason": [""],
        }
    )


def judged(throughput: float, history: list[float]) -> tuple[list[str], pd.Series]:
    f = frame(throughput)
    prepared = prepare(f, Thresholds(min_scaling_efficiency=0.7), history_stats([history], f.index))
    verdict = validate(prepared, Thresholds(min_scaling_efficiency=0.7))
    return verdict.per_row[("ssd", 2)], prepared.iloc[0]


def test_a_steady_series_flags_a_15_percent_drop():
    names, row = judged(85.0, [100.0, 101.0, 99.0, 100.5, 99.5])
    assert names == ["ExpectThroughputNotRegressed"]
    assert row["regression_tolerance_used"] == pytest.approx(0.1)  # the series is quieter than the tolerance


def test_a_noisy_series_does_not_call_its_own_noise_a_regression():
    history = [100.0, 88.0, 112.0, 95.0, 106.0]  # +-10% week to week, like this machine
    names, row = judged(85.0, history)
    assert names == []
    assert row["regression_tolerance_used"] > 0.15
    names, _ = judged(60.0, history)  # a 40% drop is beyond any noise
    assert names == ["ExpectThroughputNotRegressed"]


def test_too_little_history_is_not_judged():
    names, row = judged(50.0, [100.0] * (MIN_HISTORY - 1))
    assert names == [] and pd.isna(row["regression_floor"]) and row["history_n"] == MIN_HISTORY - 1
    names, _ = judged(50.0, [100.0] * MIN_HISTORY)
    assert names == ["ExpectThroughputNotRegressed"]


def test_the_noise_factor_is_the_prediction_bound_for_one_new_run():
    from bench.analysis.history.regression import noise_factor

    k = noise_factor(pd.Series([3, 8, 1000]))
    assert k.tolist() == pytest.approx([4.97, 2.51, 1.96], abs=0.01)
