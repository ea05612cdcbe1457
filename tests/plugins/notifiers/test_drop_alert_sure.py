"""A drop the noise model confirmed, alerted through a real webhook receiver and a real store: the notice
says how sure it is (its 95% interval and the runs at the new level that confirmed it), and the run
that only suspected it sent nothing (issue 54). Weekly runs drawn with a fixed seed."""

from __future__ import annotations

import json

from bench.config.models import AlertTargets
from tests.bench.analysis.history.test_changes import weekly
from tests.bench.store.conftest import url  # noqa: F401 -- the fixture: a store of its own, SQLite and PostgreSQL
from tests.infra.receivers import WebhookReceiver
from tests.plugins.notifiers.test_change_alert_pending import plan_for, state, store  # noqa: F401


def test_an_8pct_drop_is_sent_once_confirmed_with_its_interval_and_runs(monkeypatch, tmp_path, store):  # noqa: F811
    from scalewatch.tasks.alert import send_alerts

    found = weekly(store, [1000.0] * 30 + [920.0] * 2, seed=54)
    # issue 63: one series alerts on strong evidence only. 8% at 1.5% noise is confirmed by its second run;
    # 6% waits for its third (E-Divisive then alerts it, without the interval), 5% for its fourth
    assert found[30] == []  # the first low run: suspected at most, nothing sent
    (notice,) = found[31]
    assert notice["kind"] == "change"
    row = store.change_alerts().iloc[0]
    assert row["confirmed_runs"] == 2 and 0 < row["drop_ci_low"] < 0.08 < row["drop_ci_high"]
    assert "drop 95% CI" in notice["line"] and "2 runs at the new level" in notice["line"]
    plan = plan_for(tmp_path, "weekly-031", AlertTargets(slack_conn_id="sw_t_slack"))
    passing = {"passed": True, "failures": [], "inconclusive": [], "report": "/w/r/report.html"}
    with WebhookReceiver() as webhook:
        conn = {"conn_type": "http", "host": f"http://127.0.0.1:{webhook.port}", "password": "services/T/B/tok"}
        monkeypatch.setenv("AIRFLOW_CONN_SW_T_SLACK", json.dumps(conn))
        send_alerts(plan, passing | {"changes": [notice]}, {})
        (text,) = [p["json"]["text"] for p in webhook.posts]
    assert "change point (regression)" in text and "drop 95% CI" in text and "2 runs at the new level" in text
    assert state(store) == ["alerted"]
