"""Results store against real SQLite and a real PostgreSQL (started by .ci/run; URL in env)."""

import os
import threading

import numpy as np
import pandas as pd
import pytest

from bench.analysis.frame import build_frame
from bench.store.db import SCHEMA_VERSION, ResultsStore

URLS = ["sqlite"] + (["postgresql"] if os.environ.get("SCALEWATCH_TEST_PG_URL") else [])


@pytest.fixture(params=URLS)
def store(request, tmp_path):
    if request.param == "sqlite":
        return ResultsStore(f"sqlite:///{tmp_path}/r.db")
    s = ResultsStore(os.environ["SCALEWATCH_TEST_PG_URL"])
    with s.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM results; DELETE FROM suite_runs")
    return s


def frame(suite: str, thr: float, started: str, gpus=(1, 2)) -> pd.DataFrame:
    rows = [
        {
            "suite_run_id": suite,
            "workload": "ssd",
            "gpus": g,
            "state": "COMPLETED",
            "valid": True,
            "throughput_img_s": thr * g,
            "cluster": "c",
            "started_at": started,
            "launcher": "local",
            "reason": "",
            "versions": "{}",
            "schema_version": 1,
            "cache_risk": False,
            "bandwidth_valid": True,
            "drop_caches": "done",
        }
        for g in gpus
    ]
    f = build_frame(rows)
    return f.assign(
        accepted=True,
        passed=True,
        failed_expectations="[]",
        scaling_efficiency=1.0,
        bandwidth_efficiency=np.nan,
    )


def test_migrations_recorded(store):
    assert store.schema_version() == SCHEMA_VERSION
    assert store.migrate() == SCHEMA_VERSION  # idempotent


def test_rerun_replaces_rows_without_duplicates(store):
    store.upsert(frame("w1", 100, "2026-01-01"))
    store.upsert(frame("w1", 120, "2026-01-01", gpus=(1,)))
    rows = store.frame()
    assert len(rows) == 1 and rows["throughput_img_s"].iloc[0] == 120


def test_history_median_uses_last_k_accepted(store):
    for i, thr in enumerate([100, 110, 90, 500]):
        store.upsert(frame(f"w{i}", thr, f"2026-01-0{i + 1}"))
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE results SET accepted = false WHERE suite_run_id = 'w3'")
    current = frame("now", 10, "2026-02-01")
    median = store.history_median(current, runs=2, exclude_suite="now")
    assert list(median) == [100.0, 200.0]  # last two accepted: 90 and 110


def test_concurrent_writers_lose_nothing(store):
    errors = []

    def write(i):
        try:
            store.upsert(frame(f"c{i}", 100 + i, f"2026-03-{i + 1:02d}"))
        except Exception as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = store.frame()
    assert len(rows) == 16 and rows.duplicated(["suite_run_id", "workload", "gpus"]).sum() == 0
