"""A suspected regression runs once more before it is called: real `bench sweep` runs against a real
results store whose history is a real clean run of the same series, the slowdown a cgroup-v1 CPU quota.

Slowed once (the first run only, as a busy moment of a shared VM would), the second run clears the
floor and no regression is called; slowed throughout (a slower system), both runs fall under it and the
failure says so with both figures."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pandas as pd
import pytest

from bench.store.db import ResultsStore
from tests.bench.analysis.verdict.test_bottleneck import config as sweep_config
from tests.bench.analysis.verdict.test_bottleneck import sweep
from tests.infra.faults import cpu_quota, train_pids, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.rates]

NOT_REGRESSED = "ExpectThroughputNotRegressed"


def config(data: Path) -> dict:
    # A wide floor: the unthrottled second run must clear it on a noisy 2-core box, and half a core
    # (about half the images/s) must not.
    over = {"regression_tolerance": 0.3, "max_step_time_spread": 3.0}
    return sweep_config(data, gpus=[1], probe_storage=False, **over)


@pytest.fixture
def half_a_core():
    with cpu_quota(0.5, "regression") as group:
        yield group


@pytest.fixture(scope="module")
def clean_history(tmp_path_factory) -> tuple[Path, Path, pd.Series]:
    """A home whose store holds three accepted weeks of the series, each a copy of one real clean run, made
    once for the module (a clean run costs ~15 s); each test judges its run against its own copy."""
    base = tmp_path_factory.mktemp("regression-history")
    home, data = base / "home", base / "data"
    outcome, frame = sweep(home, "clean", config(data))
    assert outcome["verdict"] == "PASSED", outcome
    store = ResultsStore(f"sqlite:///{home / 'r.db'}")
    stored = store.frame()
    for week in range(3):
        suite = f"week-{week}"
        started = (pd.Timestamp("2026-11-01T03:00:00", tz="UTC") + pd.Timedelta(weeks=week)).isoformat()
        store.upsert(
            stored.assign(suite_run_id=suite, started_at=started),
            {"suite_run_id": suite, "started_at": started, "cluster": "local", "passed": True, "config": "{}"},
        )
    return home, data, frame.iloc[0]


@pytest.fixture
def history(tmp_path, clean_history) -> tuple[Path, Path, pd.Series]:
    """This test's copy of the module's history home (the dataset is shared: runs only read it, and the
    series' key holds its path)."""
    base, data, clean = clean_history
    home = tmp_path / "home"
    shutil.copytree(base, home)
    return home, data, clean


def test_a_run_slowed_once_is_run_again_and_no_regression_is_called(history, half_a_core):
    home, data, clean = history
    first = home / "scalewatch-home" / "runs" / "dip" / "ssd-1"

    def slow_the_first_run():
        for pid in wait_for(lambda: train_pids(first), timeout=300, interval=0.1):
            (half_a_core / "cgroup.procs").write_text(str(pid))

    mover = threading.Thread(target=slow_the_first_run, daemon=True)
    mover.start()
    outcome, frame = sweep(home, "dip", config(data))
    mover.join(1)
    r = frame.iloc[0]
    assert r["throughput_img_s"] < r["regression_floor"] <= r["repeat_img_s"], r.to_dict()
    assert r["regression_checked_img_s"] == r["repeat_img_s"]
    assert outcome["verdict"] == "PASSED", outcome
    assert (first.parent / "ssd-1-repeat").is_dir()
    assert r["throughput_img_s"] < 0.75 * clean["throughput_img_s"]  # the quota did slow the first run


def test_a_slower_system_is_slow_twice_and_the_regression_names_both_runs(history, half_a_core):
    home, data, _ = history
    prefix = f"echo $$ > {half_a_core / 'cgroup.procs'}"  # every run of this sweep under the quota
    outcome, frame = sweep(home, "slower", config(data), prefix=prefix)
    r = frame.iloc[0]
    assert r["repeat_img_s"] < r["regression_floor"] and r["throughput_img_s"] < r["regression_floor"], r.to_dict()
    failed = [f for f in outcome["failures"] if f["expectation"] == NOT_REGRESSED]
    assert outcome["verdict"] == "FAILED" and len(failed) == 1, outcome
    assert "both runs under the floor" in failed[0]["reason"]
    assert failed[0]["value"] == pytest.approx(max(r["throughput_img_s"], r["repeat_img_s"]), rel=1e-3)
    # the failing week is not accepted into the history the next week is judged against
    stored = ResultsStore(f"sqlite:///{home / 'r.db'}").frame()
    assert not stored[stored["suite_run_id"] == "slower"]["accepted"].astype(bool).any()
    assert NOT_REGRESSED in json.loads(r["failed_expectations"])
