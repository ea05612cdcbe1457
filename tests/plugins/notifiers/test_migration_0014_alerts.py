"""Revision 0014 and the alert task: change points alerted before it count as delivered to every target,
so none is sent again. Here, not beside the other 0014 tests in tests/bench/store: sending reads Airflow
connections, which configures Airflow for the whole session, and the DAG tests need their own home first."""

from __future__ import annotations

import json

from bench.store.db import ResultsStore
from bench.store.migrate import SCHEMA_REVISION
from tests.bench.store.conftest import url  # noqa: F401 -- the fixture: a store of its own, SQLite and PostgreSQL
from tests.bench.store.test_migration_0014 import KEY, store_at_0013


def test_0014_keeps_annotations_and_sends_no_change_point_alerted_before_it_again(url, monkeypatch, tmp_path):  # noqa: F811
    from bench.config.models import AlertTargets, SweepConfig, TrainConfig
    from scalewatch.tasks.alert import send_alerts
    from tests.infra.receivers import WebhookReceiver

    store_at_0013(url)
    store = ResultsStore(url)
    assert store.schema_version() == SCHEMA_REVISION
    log = store.annotation_history()
    assert log[["note", "author", "created_at", "dag_id"]].values.tolist() == [
        ["new firmware", "alice", "2026-01-20", "dA"]
    ]
    assert store.annotations()["note"].tolist() == ["new firmware"]
    changes = store.change_alerts().sort_values("changed_at")
    assert changes["state"].tolist() == ["alerted", "recovered", "recorded"]  # states kept as they were
    notices = [
        {"kind": kind, "line": f"{kind} at {at}", "metric": "throughput_img_s", "changed_at": at} | KEY
        for at, kind in (("2026-01-05", "change"), ("2026-02-02", "change"), ("2026-02-02", "recovered"))
    ]
    monkeypatch.setenv("SCALEWATCH_RESULTS_CONN_ID", "sw_t_no_such_results_conn")
    monkeypatch.setenv("SCALEWATCH_RESULTS_URL", url)
    data = str(tmp_path / "data")
    cfg = SweepConfig(
        dataset_path=data,
        train=TrainConfig(workload="ssd", data=data, steps=6),
        output_dir=str(tmp_path),
        alerts=AlertTargets(slack_conn_id="sw_t_slack"),
    )
    outcome = {"passed": True, "failures": [], "inconclusive": [], "report": "/w/r/report.html", "changes": notices}
    with WebhookReceiver() as webhook:
        conn = {"conn_type": "http", "host": f"http://127.0.0.1:{webhook.port}", "password": "services/T/B/tok"}
        monkeypatch.setenv("AIRFLOW_CONN_SW_T_SLACK", json.dumps(conn))
        send_alerts({"sweep": cfg.model_dump(mode="json"), "suite_run_id": "w1"}, outcome, {})
    assert webhook.posts == []  # all three went out before 0014: to every target, as far as it knows
