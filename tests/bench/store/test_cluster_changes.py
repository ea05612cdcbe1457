"""The weekly check's cluster-wide change (issue 63) on a real store (SQLite, and PostgreSQL where
scripts/postgres.sh started one): a shared drop of four series is stored once as a change point of scope
cluster and sent as one notice naming what moved, the series' own change points it covers recorded and not
sent; recording the run again lists the same notice; the drop going back sends one recovery. And revision
0022's downgrade refuses to drop a stored cluster change. Histories are drawn with a fixed seed."""

import json

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from alembic import command

from bench.store.db import ResultsStore
from bench.store.errors import StoreDowngradeRefused
from bench.store.migrate import SCHEMA_REVISION, alembic_config
from bench.suite.record import run_changes, watch_changes
from tests.bench.store.test_store import frame

SERIES = (("ssd", 1), ("ssd", 2), ("retinanet-b200", 1), ("retinanet-b200", 2))
DAG = "scaling_regression"


def weeks(drop_from: int, drop: float, back_at: int | None, n: int) -> np.ndarray:
    """Four series (rows) x n weekly runs: 1% own noise, 0.5% shared, `drop` lower from `drop_from` on
    (until `back_at`)."""
    rng = np.random.default_rng(6350)
    shared = rng.normal(0, 0.005, n)
    values = rng.uniform(100, 500, (len(SERIES), 1)) * np.exp(rng.normal(0, 0.01, (len(SERIES), n)) + shared)
    values[:, drop_from:back_at] *= 1 - drop
    return values


def run_frame(week: int, values: np.ndarray) -> pd.DataFrame:
    started = pd.Timestamp("2025-01-06") + pd.Timedelta(weeks=week)
    parts = [
        frame(f"w{week:03d}", float(values[i, week]), str(started + pd.Timedelta(hours=i)), (gpus,)).assign(
            workload=workload, throughput_img_s=float(values[i, week])
        )
        for i, (workload, gpus) in enumerate(SERIES)
    ]
    return pd.concat(parts, ignore_index=True)


def record(store, week: int, values: np.ndarray, watch: bool = True) -> list[dict]:
    now = run_frame(week, values)
    store.upsert(now, {"suite_run_id": f"w{week:03d}", "dag_id": DAG, "cluster": "c", "passed": True, "config": "{}"})
    if not watch:
        return []
    watch_changes(store, now, f"w{week:03d}")
    return run_changes(store, now, f"w{week:03d}")


def cluster_rows(store) -> pd.DataFrame:
    rows = store.change_alerts("c")
    return rows[rows["scope"] == "cluster"]


def test_a_shared_drop_is_one_cluster_notice_and_its_recovery_one_note(url):
    store = ResultsStore(url)
    values = weeks(56, 0.04, 66, 70)
    for week in range(56):
        record(store, week, values, watch=False)  # a year of history, stored as the weekly runs left it
    sent = [record(store, week, values) for week in (56, 57)]
    assert not [n for n in sent[0] if n.get("scope") == "cluster"]  # one low week: not a change yet
    (notice,) = [n for n in sent[1] if n.get("scope") == "cluster"]
    assert notice["kind"] == "change" and notice["state"] == "pending"
    assert "cluster-wide change (suite scaling_regression): shared drop" in notice["line"]
    assert "4 of 4 series moved" in notice["line"] and "moved most:" in notice["line"]
    assert 0 < notice["drop_ci_low"] < 0.04 < notice["drop_ci_high"]
    (row,) = cluster_rows(store).to_dict("records")
    assert (row["workload"], row["gpus"], row["config_key"], row["metric"]) == ("*", 0, DAG, "pooled")
    assert len(json.loads(row["moved"])) == 4 and row["changed_in"] == "w056" and row["detected_in"] == "w057"
    own = store.change_alerts("c")
    own = own[(own["scope"] != "cluster") & (own["detected_in"] == "w057")]
    assert (own["state"] != "pending").all()  # covered by the cluster's notice: recorded, not sent
    assert [n for n in sent[1] if n.get("scope") != "cluster" and n["kind"] == "change"] == []
    # recorded again (a retried task): the same one notice, no second row
    again = run_changes(store, run_frame(57, values), "w057")
    assert [n["line"] for n in again if n.get("scope") == "cluster"] == [notice["line"]]
    assert len(cluster_rows(store)) == 1
    later = [n for week in range(58, 70) for n in record(store, week, values)]
    # the series confirm the shared drop a run or two after the pool does (w058 here), and go back with it:
    # folded into the cluster's notice and its recovery note, never sent on their own
    assert [n["line"] for n in later if n.get("scope") != "cluster"] == []
    assert set(store.change_alerts("c").query("scope != 'cluster'")["detected_in"]) > {"w057"}
    back = [n for n in later if n.get("scope") == "cluster"]
    assert [n["kind"] for n in back] == ["recovered"]
    assert "recovered" in back[0]["line"] and cluster_rows(store)["state"].tolist() == ["recovered"]
    store.engine.dispose()


def test_0022_downgrade_refuses_to_drop_a_stored_cluster_change(url):
    store = ResultsStore(url)
    assert store.schema_version() == SCHEMA_REVISION == "0023"
    key = {"cluster": "c", "workload": "*", "gpus": 0, "config_key": DAG, "metric": "pooled"}
    store.upsert_change(
        key | {"changed_at": "2026-01-05", "state": "pending", "scope": "cluster", "moved_most": "checkpoint"}
    )
    refused = pytest.raises(StoreDowngradeRefused, match=r"change_alerts\.scope")
    with store.migration_connection() as conn, refused:
        command.downgrade(alembic_config(conn), "0021")
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE change_alerts SET scope = NULL, moved_most = NULL"))
    with store.migration_connection() as conn:
        command.downgrade(alembic_config(conn), "0021")
        assert "scope" not in {c["name"] for c in sa.inspect(conn).get_columns("change_alerts")}
        assert conn.execute(sa.text("SELECT count(*) FROM change_alerts")).scalar() == 1
    store.engine.dispose()
