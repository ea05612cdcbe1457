"""Measurement rules on real local runs: a window too short is INCONCLUSIVE and never history; every
figure carries an interval that contains it; a run goes on until min_measure_s is measured."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.config.models import SweepConfig
from bench.config.types import parse
from bench.store.db import ResultsStore
from bench.suite.sweep import sweep

pytestmark = pytest.mark.slow
MIN_MEASURE_S = 2  # the extension test's floor


def cfg(tmp_path, ceilings: bool = True, **train) -> SweepConfig:
    return parse(
        SweepConfig,
        {
            "workloads": ["ssd"],
            "gpus": [1, 2],
            "dataset_path": str(tmp_path / "d"),
            "output_dir": str(tmp_path / "runs"),
            # beside the suite's other lanes foreign work on the ranks' cores is the rule: the windows are
            # under test here, not interference (issue 62: over max_foreign_share a scale is INCONCLUSIVE)
            "bounds": {"min_scaling_efficiency": 0.0, "max_step_time_spread": 100, "max_foreign_share": 1.0},
            "ceilings": ceilings,
            "train": {"workload": "ssd", "synthetic": True, "batch_size": 4, "sample_interval_s": 0.25} | train,
        },
    )


def test_a_run_shorter_than_min_measure_s_is_inconclusive_and_never_history(tmp_path):
    """Both scales' rows are judged on their own measured window; the 2-rank scale's node-ceiling run
    (ceilings: a third run of two ranks) is left out: no assertion here reads it, and it is the most
    expensive of the three runs. The extension test below keeps it, and its intervals."""
    store = f"sqlite:///{tmp_path}/r.db"
    # whole epochs are never extended: 1 epoch of the synthetic loader is far below 60 s
    short = cfg(tmp_path, ceilings=False, epochs=1, warmup_steps=1, min_measure_s=60)
    outcome = sweep(short, store, "short", log=lambda m: None)
    assert outcome["verdict"] == "INCONCLUSIVE" and not outcome["passed"]
    frame = pd.read_csv(outcome["results_csv"])
    assert list(frame["verdict"]) == ["inconclusive", "inconclusive"]
    assert all("shorter than min_measure_s 60s" in r for r in frame["inconclusive_reason"])
    rows = ResultsStore(store).frame()
    assert not rows["accepted"].any() and list(rows["verdict"]) == ["inconclusive", "inconclusive"]
    assert {i["gpus"] for i in outcome["inconclusive"]} == {1, 2}
    assert outcome["failures"] == []  # inconclusive is neither pass nor fail


def test_min_measure_s_extends_the_run_and_intervals_contain_the_estimates(tmp_path):
    """The 2 planned steps take well under MIN_MEASURE_S: the run is extended until it is measured at each
    scale. 2 s (not 4) is as far past the planned steps; each second more is a second of every rank's
    training the suite pays for."""
    store = f"sqlite:///{tmp_path}/r.db"
    train = {"steps": 2, "warmup_steps": 1, "min_measure_s": MIN_MEASURE_S}
    outcome = sweep(cfg(tmp_path, **train), store, "long", log=lambda m: None)
    frame = pd.read_csv(outcome["results_csv"])
    assert outcome["verdict"] == "PASSED", frame.to_dict("records")
    assert sorted(frame["gpus"]) == [1, 2]  # both scales, so the loop below judges each
    for r in frame.to_dict("records"):
        assert r["measured_s"] >= 0.98 * MIN_MEASURE_S and r["min_measure_s"] == MIN_MEASURE_S
        assert r["throughput_ci_low"] <= r["throughput_img_s"] <= r["throughput_ci_high"]
        assert r["throughput_ci_high"] > r["throughput_ci_low"] > 0
        lo, hi = r["scaling_efficiency_ci_low"], r["scaling_efficiency_ci_high"]
        assert lo <= r["scaling_efficiency"] <= hi and math.isfinite(lo)
        assert r["verdict"] == "pass" and pd.isna(r["inconclusive_reason"])
    stored = ResultsStore(store).frame()
    assert len(stored) == len(frame) == 2
    assert stored["accepted"].all() and stored["throughput_ci_low"].notna().all()
