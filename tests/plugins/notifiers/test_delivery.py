"""Alert delivery against real receivers: escaping, every target tried, no clear-text password, one
deadline per delivery, secrets never in an error."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.models import AlertTargets
from tests.infra.receivers import SmtpReceiver, WebhookReceiver


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def _slack(monkeypatch, port: int) -> None:
    conn = {"conn_type": "http", "host": f"http://127.0.0.1:{port}", "password": "services/T/B/tok"}
    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SLACK", json.dumps(conn))


def _smtp(monkeypatch, port: int, **extra) -> None:
    conn = {
        "conn_type": "smtp",
        "host": "127.0.0.1",
        "port": port,
        "login": "alerts",
        "password": "smtpSECRETpw",
        "extra": extra,
    }
    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SMTP", json.dumps(conn))


TARGETS = AlertTargets(slack_conn_id="sw_t_slack", smtp_conn_id="sw_t_smtp", email_to=("oncall@example.com",))


def test_slack_markup_in_a_reason_is_escaped(monkeypatch):
    from scalewatch.notifiers.registry import send

    with WebhookReceiver() as webhook:
        _slack(monkeypatch, webhook.port)
        send(AlertTargets(slack_conn_id="sw_t_slack"), "s", "corrupt image <!channel>.jpg & <@U123>", {})
    text = webhook.posts[0]["json"]["text"]
    assert text == "corrupt image &lt;!channel&gt;.jpg &amp; &lt;@U123&gt;"


def test_a_slack_outage_does_not_lose_the_email(monkeypatch):
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    _slack(monkeypatch, _closed_port())
    with SmtpReceiver() as smtp:
        _smtp(monkeypatch, smtp.port, allow_plaintext_login=True)
        with pytest.raises(AlertDeliveryError, match=r"sent via \['SmtpAlert'\]; failed: SlackWebhookAlert"):
            send(TARGETS, "subject", "ssd @ 2 GPUs failed", {})
    assert len(smtp.messages) == 1 and "ssd @ 2 GPUs failed" in smtp.messages[0]["data"]


def test_smtp_password_is_never_sent_in_clear_text_unless_allowed(monkeypatch):
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    with SmtpReceiver() as smtp:
        _smtp(monkeypatch, smtp.port)  # login, no starttls, no ssl, no explicit allowance
        with pytest.raises(AlertDeliveryError, match="refusing to send the password without TLS"):
            send(AlertTargets(smtp_conn_id="sw_t_smtp", email_to=("a@example.com",)), "s", "t", {})
    assert smtp.logins == [] and smtp.messages == []


def test_alert_links_the_report_and_the_run_through_the_public_base_url():
    from scalewatch.notifiers.message import alert_text

    failure = {"workload": "ssd", "gpus": 2, "metric": "m", "value": 1, "bound": 2, "expectation": "E"}
    linked = alert_text(
        "r1",
        [failure],
        "/w/runs/r1/report.html",
        "https://af.example/scalewatch/reports/r1/report.html",
        "https://af.example/dags/d/runs/r1",
    )
    assert "Report: https://af.example/scalewatch/reports/r1/report.html" in linked
    assert "Airflow run: https://af.example/dags/d/runs/r1" in linked and "/w/runs" not in linked
    bare = alert_text("r1", [failure], "/w/runs/r1/report.html")
    assert "a path on the Airflow worker; set [api] base_url" in bare


def test_alert_names_an_emulated_workloads_accelerators_at_au_measured_and_projected():
    """Issue 51: the AU failure says where AU fell; the headline figure (how many accelerators the storage
    feeds at AU) reaches the recipient too, each entry labelled measured or projected; none without one."""
    from scalewatch.notifiers.message import alert_text

    failure = {"workload": "w", "gpus": 2, "metric": "au", "value": 0.7, "bound": 0.8, "expectation": "E"}
    at_au = {
        "w": [
            {"accelerators": 1, "measured": True, "accelerator": "a100", "min_au": 0.9, "basis": "AU fell at 2"},
            {"accelerators": 7, "measured": False, "accelerator": "a100", "min_au": 0.9, "basis": "the store binds"},
            {"accelerators": None, "measured": True, "accelerator": "a100", "min_au": 0.9, "basis": "no scale"},
        ]
    }
    lines = alert_text("r1", [failure], None, at_au=at_au).splitlines()
    assert [line for line in lines if "accelerators_at_au" in line] == [
        "• w: accelerators_at_au = 1 a100 at AU >= 0.9 (measured; AU fell at 2)",
        "• w: accelerators_at_au = 7 a100 at AU >= 0.9 (projected; the store binds)",
    ]
    assert "accelerators_at_au" not in alert_text("r1", [failure], None)


# A short deadline for the trickle test: the mechanism is the same at the shipped 20 s (which
# test_the_alert_task_outlasts_every_delivery_deadline holds to), the test just does not wait 20 s for it.
TRICKLE_DEADLINE_S = 3.0


@pytest.mark.rates
def test_a_trickling_webhook_is_cut_at_the_total_deadline_and_the_email_still_goes(monkeypatch):
    """One byte a second never trips a per-read timeout (the socket's, set from the deadline, is longer):
    a 41-byte answer would take 41 s, as one byte every 4 s held `notify` 48 s and more before. The whole
    request has one deadline, its socket is cut there, and the e-mail after it is still sent."""
    import scalewatch.notifiers
    import scalewatch.notifiers.slack
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    monkeypatch.setattr(scalewatch.notifiers, "WEBHOOK_DEADLINE_S", TRICKLE_DEADLINE_S)
    monkeypatch.setattr(scalewatch.notifiers.slack, "WEBHOOK_DEADLINE_S", TRICKLE_DEADLINE_S)
    with WebhookReceiver(trickle_s=1.0) as webhook, SmtpReceiver() as smtp:
        _slack(monkeypatch, webhook.port)
        _smtp(monkeypatch, smtp.port, allow_plaintext_login=True)
        with pytest.raises(AlertDeliveryError) as raised:
            send(TARGETS, "subject", "ssd @ 2 GPUs failed", {})
        # the receiver sees the connection close as the deadline cuts the socket; a socket left open
        # (the request abandoned, not cut) would trickle on for 41 s and never set this
        assert webhook.left.wait(30), "the trickling webhook's connection was still open 30 s after the deadline"
    assert (
        "sent via ['SmtpAlert']; failed: SlackWebhookAlert (sw_t_slack): DeliveryTimeout: slack webhook "
        f"(sw_t_slack) did not finish within {TRICKLE_DEADLINE_S:g} s" in str(raised.value)
    )
    assert len(webhook.posts) == 1 and len(smtp.messages) == 1
    # cut mid-answer: the client never read the whole answer, so it was the deadline that ended the request
    assert len(webhook.hung_up) == 1 and 0 < webhook.hung_up[0] < len(WebhookReceiver.TRICKLED), webhook.hung_up


def test_the_alert_task_outlasts_every_delivery_deadline():
    """With max_active_runs=1 a hung alert would hold next week's run: the task is bounded, above the
    deadlines it can spend (every target, for the verdict and for the change points). The DAG is built
    in its own process, so this process's Airflow settings stay as the DAG tests set them up."""
    from scalewatch.notifiers import ALERT_TASK_TIMEOUT, SENDS_PER_ALERT_TASK, SMTP_DEADLINE_S, WEBHOOK_DEADLINE_S

    probe = (
        "from scalewatch.dag_factory import build\n"
        "dag = build('sw_t_alert_timeout', None, {})\n"
        "timeout = dag.get_task('alert').execution_timeout\n"
        "print(dag.max_active_runs, timeout and timeout.total_seconds())\n"
    )
    root = Path(__file__).resolve().parents[3]
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "plugins"), os.environ.get("PYTHONPATH", "")])
    }
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["1", str(ALERT_TASK_TIMEOUT.total_seconds())]
    spent = SENDS_PER_ALERT_TASK * (WEBHOOK_DEADLINE_S + SMTP_DEADLINE_S)
    assert ALERT_TASK_TIMEOUT.total_seconds() >= spent + 60


TOKEN = "services/T0SECRET/B0SECRET/xoxTOKENvalue"


@pytest.mark.parametrize(
    "host",
    [
        "hooks.example.com",  # no scheme: urllib's "unknown url type" repeated the whole URL
        "hooks.example.com:443",
        "ftp://hooks.example.com",
        "https://",
        "https://hooks.example.com:notaport",
        "http://[::1",
        "https://hooks.example.com/a b",
    ],
)
def test_a_malformed_webhook_url_names_the_connection_never_the_token(monkeypatch, caplog, host):
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SLACK", json.dumps({"conn_type": "http", "host": host, "password": TOKEN}))
    with caplog.at_level(logging.DEBUG), pytest.raises(AlertDeliveryError) as raised:
        send(AlertTargets(slack_conn_id="sw_t_slack"), "s", "t", {})
    message = str(raised.value)
    assert "SlackWebhookAlert (sw_t_slack): ConfigError: slack connection sw_t_slack: host" in message
    assert "alert via SlackWebhookAlert (sw_t_slack) failed: slack connection sw_t_slack: host" in caplog.text
    for secret in ("T0SECRET", "B0SECRET", "xoxTOKENvalue"):
        assert secret not in message and secret not in caplog.text


def test_an_unreachable_webhook_names_the_connection_never_the_token(monkeypatch, caplog):
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    conn = {"conn_type": "http", "host": f"http://127.0.0.1:{_closed_port()}", "password": TOKEN}
    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SLACK", json.dumps(conn))
    with caplog.at_level(logging.DEBUG), pytest.raises(AlertDeliveryError, match="could not be reached") as raised:
        send(AlertTargets(slack_conn_id="sw_t_slack"), "s", "t", {})
    assert "slack webhook (sw_t_slack)" in str(raised.value)
    assert "xoxTOKENvalue" not in str(raised.value) and "xoxTOKENvalue" not in caplog.text
