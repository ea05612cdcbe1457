"""A change point's notice against real receivers and a real store: stored pending, sent to every target
on its own (a Slack outage never keeps it from the e-mail), marked per target as it is delivered, and a
retry sends each target only what it still lacks."""

from __future__ import annotations

import json
import socket
from email import message_from_string
from pathlib import Path

import pytest

from bench.config.models import AlertTargets, SweepConfig, TrainConfig
from bench.store.db import ResultsStore
from bench.suite.plan import suite_dir
from tests.bench.analysis.history.test_changes import weekly
from tests.bench.store.conftest import url  # noqa: F401 -- the fixture: a store of its own, SQLite and PostgreSQL
from tests.infra.receivers import SmtpReceiver, WebhookReceiver

TARGETS = AlertTargets(slack_conn_id="sw_t_slack", smtp_conn_id="sw_t_smtp", email_to=("oncall@example.com",))
FAILURE = {
    "workload": "ssd",
    "gpus": 2,
    "metric": "scaling_efficiency",
    "value": 0.6,
    "bound": 0.8,
    "expectation": "ExpectScalingEfficiencyAtLeastBound",
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def _slack(monkeypatch, port: int) -> None:
    conn = {"conn_type": "http", "host": f"http://127.0.0.1:{port}", "password": "services/T/B/tok"}
    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SLACK", json.dumps(conn))


def _smtp(monkeypatch, port: int) -> None:
    conn = {"conn_type": "smtp", "host": "127.0.0.1", "port": port, "extra": {}}
    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SMTP", json.dumps(conn))


@pytest.fixture
def store(monkeypatch, url):  # noqa: F811
    """The results store the alert task opens (results_url), empty."""
    monkeypatch.setenv("SCALEWATCH_RESULTS_CONN_ID", "sw_t_no_such_results_conn")
    monkeypatch.setenv("SCALEWATCH_RESULTS_URL", url)
    return ResultsStore(url)


def confirmed_change(store: ResultsStore) -> tuple[str, list[dict]]:
    """Weekly runs until a 12% drop is confirmed: (the confirming run, its notices), as the evaluate task
    leaves them in its outcome."""
    for week, found in enumerate(weekly(store, [1000.0] * 40 + [880.0] * 3)):
        if found:
            return f"weekly-{week:03d}", found
    raise AssertionError("the drop was never confirmed")


def plan_for(tmp_path: Path, suite: str, alerts: AlertTargets) -> dict:
    data = str(tmp_path / "data")
    cfg = SweepConfig(
        dataset_path=data,
        train=TrainConfig(workload="ssd", data=data, steps=6),
        output_dir=str(tmp_path),
        alerts=alerts,
    )
    suite_dir(Path(cfg.output_dir), suite).mkdir(parents=True, exist_ok=True)  # the run's folder
    return {"sweep": cfg.model_dump(mode="json"), "suite_run_id": suite}


def state(store: ResultsStore) -> list[str]:
    return store.change_alerts()["state"].tolist()


def test_a_slack_outage_still_delivers_the_change_by_email_and_the_retry_sends_slack_only_what_it_lacks(
    monkeypatch, tmp_path, store
):
    from scalewatch.notifiers.registry import AlertDeliveryError
    from scalewatch.tasks.alert import send_alerts

    suite, changes = confirmed_change(store)
    assert [c["kind"] for c in changes] == ["change"]
    assert state(store) == ["pending"]  # stored as news, not as sent: nothing was delivered yet
    plan = plan_for(tmp_path, suite, TARGETS)
    outcome = {"passed": False, "failures": [FAILURE], "inconclusive": [], "report": "/w/r/report.html"}
    outcome["changes"] = changes
    with SmtpReceiver() as smtp:
        _smtp(monkeypatch, smtp.port)
        _slack(monkeypatch, _closed_port())  # Slack is down
        with pytest.raises(AlertDeliveryError, match=r"failed: SlackWebhookAlert \(sw_t_slack\)"):
            send_alerts(plan, outcome, {})
        subjects = [message_from_string(m["data"])["Subject"] for m in smtp.messages]
        # the verdict failing on Slack did not keep the change notice from the e-mail
        assert len(subjects) == 2 and "FAILED" in subjects[0] and "1 change(s)" in subjects[1], subjects
        assert state(store) == ["pending"]  # Slack still lacks it: the task fails, Airflow retries

        with WebhookReceiver() as webhook:  # the retry, Slack back
            _slack(monkeypatch, webhook.port)
            send_alerts(plan, outcome, {})
            texts = [p["json"]["text"] for p in webhook.posts]
            assert len(texts) == 2 and "FAILED" in texts[0] and "change point (regression)" in texts[1], texts
            assert len(smtp.messages) == 2  # the e-mail already had both: nothing sent to it twice
            assert state(store) == ["alerted"]  # every target has it now

            send_alerts(plan, outcome, {})  # the task cleared once more: nothing is news to anyone
            assert len(webhook.posts) == 2 and len(smtp.messages) == 2


def test_a_change_notice_a_target_got_is_not_sent_to_it_again_when_the_run_is_evaluated_again(
    monkeypatch, tmp_path, store
):
    """Evaluate and alert cleared together: the outcome lists the run's change again (read back from the
    store), and the target that already got it is not sent it a second time."""
    from bench.suite.record import run_changes
    from scalewatch.tasks.alert import send_alerts

    suite, changes = confirmed_change(store)
    alerts = AlertTargets(slack_conn_id="sw_t_slack")
    plan = plan_for(tmp_path, suite, alerts)
    passing = {"passed": True, "failures": [], "inconclusive": [], "report": "/w/r/report.html"}
    with WebhookReceiver() as webhook:
        _slack(monkeypatch, webhook.port)
        send_alerts(plan, passing | {"changes": changes}, {})
        assert len(webhook.posts) == 1 and state(store) == ["alerted"]
        run = store.frame()
        again = run_changes(store, run[run["suite_run_id"] == suite], suite)
        assert [c["line"] for c in again] == [c["line"] for c in changes]
        send_alerts(plan, passing | {"changes": again}, {})
    assert len(webhook.posts) == 1
