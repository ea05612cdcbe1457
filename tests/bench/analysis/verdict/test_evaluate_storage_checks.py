"""The storage ceiling's own regression check against earlier probes in a real results store: judged
only with enough history, and never on the probe's own run-to-run noise (CI's example suite failed on
a 3-second fio level that came in 12% under a median of two earlier probes)."""

import pandas as pd
import pytest

from bench.analysis.history.regression import MIN_HISTORY
from bench.analysis.verdict.evaluate import storage_checks
from bench.config.models import SweepConfig, TrainConfig
from bench.store.db import ResultsStore


@pytest.fixture
def store(tmp_path):
    return ResultsStore(f"sqlite:///{tmp_path}/r.db")


@pytest.fixture
def cfg(tmp_path):
    data = str(tmp_path / "data")
    return SweepConfig(
        dataset_path=data, train=TrainConfig(workload="ssd", data=data, steps=6), output_dir=str(tmp_path)
    )


def probe(ceiling: float, conclusive: bool = True) -> dict:
    return {
        "ceiling_mb_s": ceiling,
        "conclusive": conclusive,
        "reason": "" if conclusive else "no plateau",
        "method": "direct",
        "block_size": 65536,
        "sample_bytes": 1e6,
        "paths": ["/data"],
        "levels": [],
        "probed_at": "2026-12-01T00:00:00",
    }


def keep(store: ResultsStore, history: list[float]) -> None:
    for week, ceiling in enumerate(history):
        kept = {"suite_run_id": f"w{week:02d}", "cluster": "local", "accepted": True}
        store.upsert_probe(probe(ceiling) | kept | {"probed_at": f"2026-10-{week + 1:02d}"})


def check(cfg, store, ceiling: float, conclusive: bool = True) -> tuple[list[dict], dict]:
    failures, _, judged = storage_checks(cfg, "now", pd.DataFrame(), probe(ceiling, conclusive), store)
    return failures, judged


def test_a_steady_ceiling_flags_a_15_percent_drop(cfg, store):
    keep(store, [500.0, 505.0, 495.0, 502.0])
    failures, judged = check(cfg, store, 425.0)
    assert [f["expectation"] for f in failures] == ["ExpectStorageCeilingNotRegressed"]
    assert judged["regression_tolerance_used"] == pytest.approx(0.1) and not judged["accepted"]
    assert "over 4 probes" in failures[0]["reason"]
    failures, judged = check(cfg, store, 480.0)
    assert failures == [] and judged["accepted"]


def test_a_noisy_ceiling_does_not_call_its_own_noise_a_regression(cfg, store):
    keep(store, [500.0, 420.0, 580.0, 460.0, 540.0])  # +-15% probe to probe, like a 3 s level here
    failures, judged = check(cfg, store, 420.0)
    assert failures == [] and judged["regression_tolerance_used"] > 0.15
    failures, _ = check(cfg, store, 200.0)  # a 60% drop is beyond any noise
    assert [f["metric"] for f in failures] == ["storage_ceiling_mb_s"]


def test_probes_of_other_files_under_the_same_path_are_not_its_history(cfg, store):
    keep(store, [500.0, 505.0, 495.0, 502.0])
    other = probe(200.0) | {"sample_bytes": 5e4}  # the dataset was re-staged at another size
    failures, _, judged = storage_checks(cfg, "now", pd.DataFrame(), other, store)
    assert failures == [] and judged["history_n"] == 0


def test_too_few_probes_or_an_inconclusive_one_are_not_judged(cfg, store):
    keep(store, [500.0] * (MIN_HISTORY - 1))
    failures, judged = check(cfg, store, 100.0)
    assert failures == [] and judged["regression_floor_mb_s"] is None and judged["history_n"] == MIN_HISTORY - 1
    keep(store, [500.0] * MIN_HISTORY)
    assert check(cfg, store, 100.0)[0]
    failures, judged = check(cfg, store, 100.0, conclusive=False)
    assert failures == [] and not judged["accepted"]  # never enters history either


def test_a_spread_from_three_probes_is_widened_as_the_guess_it_is(cfg, store):
    """Benchmark section 8: three ceilings within 4% of each other, then a fourth 10.6% under their
    median on the same idle disk. Three runs say little about the noise: the floor is the prediction
    bound for one new probe (k = 5.0 spreads at three, not 2), and a 40% drop still fails."""
    keep(store, [243.2, 249.1, 226.4])
    failures, judged = check(cfg, store, 217.5)
    assert failures == [] and judged["regression_tolerance_used"] > 0.15
    failures, _ = check(cfg, store, 145.0)
    assert [f["expectation"] for f in failures] == ["ExpectStorageCeilingNotRegressed"]
