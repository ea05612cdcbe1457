"""Alert delivery against real receivers: escaping, every target tried, no clear-text password."""

from __future__ import annotations

import json
import socket

import pytest

from bench.config import AlertTargets
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
