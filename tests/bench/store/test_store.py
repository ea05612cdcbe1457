"""Results store against real SQLite and a real PostgreSQL (started by .ci/run; URL in env)."""

import os
import threading

import numpy as np
import pandas as pd
import pytest

from bench.analysis.frame import build_frame
from bench.store.db import ResultsStore
from bench.store.migrate import SCHEMA_REVISION

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
            "config_key": "tiny/dali/bs8/img128/amp0",
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
    assert store.schema_version() == SCHEMA_REVISION
    assert store.migrate() == SCHEMA_REVISION  # idempotent


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


def test_history_ignores_runs_with_another_config(store):
    store.upsert(frame("old", 100, "2026-01-01").assign(config_key="tiny/dali/bs32/img300/amp0"))
    assert store.history_median(frame("now", 10, "2026-02-01"), runs=4, exclude_suite="now").isna().all()


def test_migration_adds_column_to_a_version_2_store(tmp_path):
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path}/old.db"
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # what a store written by schema version 2 looks like
        conn.exec_driver_sql("CREATE TABLE scalewatch_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
        conn.exec_driver_sql("INSERT INTO scalewatch_schema (version) VALUES (1), (2)")
        conn.exec_driver_sql(
            "CREATE TABLE results (suite_run_id TEXT, workload TEXT, gpus INTEGER, throughput_img_s FLOAT, "
            "PRIMARY KEY (suite_run_id, workload, gpus))"
        )
        conn.exec_driver_sql("INSERT INTO results VALUES ('w0', 'ssd', 1, 99.0)")
        conn.exec_driver_sql(  # migration 1 created both tables
            "CREATE TABLE suite_runs (suite_run_id TEXT PRIMARY KEY, started_at TEXT, cluster TEXT, "
            "passed BOOLEAN, report_path TEXT, config TEXT)"
        )
    store = ResultsStore(url)
    assert store.schema_version() == SCHEMA_REVISION
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT throughput_img_s, config_key FROM results").fetchall() == [(99.0, None)]
