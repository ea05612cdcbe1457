"""The alert task's messages, delivered to a real webhook receiver."""

from __future__ import annotations

import json

from bench.config.models import AlertTargets, SweepConfig, TrainConfig
from tests.infra.receivers import WebhookReceiver


def slack_plan(tmp_path, **sweep) -> dict:
    """A plan whose only alert target is the Slack connection `sw_t_slack` (`slack_to` points it at a receiver)."""
    data = str(tmp_path / "data")
    cfg = SweepConfig(
        dataset_path=data,
        train=TrainConfig(workload="ssd", data=data, steps=6),
        output_dir=str(tmp_path),
        alerts=AlertTargets(slack_conn_id="sw_t_slack"),
        **sweep,
    )
    return {"sweep": cfg.model_dump(mode="json"), "suite_run_id": "r1"}


def slack_to(monkeypatch, webhook) -> None:
    conn = {"conn_type": "http", "host": f"http://127.0.0.1:{webhook.port}", "password": "services/T/B/tok"}
    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SLACK", json.dumps(conn))


def scaling_failure(gpus: int, value: float, bound: float) -> dict:
    return {
        "workload": "ssd",
        "gpus": gpus,
        "metric": "scaling_efficiency",
        "value": value,
        "bound": bound,
        "expectation": "ExpectScalingEfficiencyAtLeastBound",
    }


def test_a_passing_run_that_confirms_a_change_point_still_sends_it_and_nothing_else(monkeypatch, tmp_path):
    from scalewatch.tasks.alert import send_alerts

    plan = slack_plan(tmp_path)
    change = {
        "kind": "change",
        "cluster": "gpu-a",
        "line": "ssd @ 16 GPUs, images/s: change point (regression) -9.8% at 2026-11-02: mean 1180 -> 1064",
    }
    outcome = {"passed": True, "failures": [], "inconclusive": [], "report": "/w/r1/report.html", "changes": [change]}
    with WebhookReceiver() as webhook:
        slack_to(monkeypatch, webhook)
        send_alerts(plan, outcome, {})
        send_alerts(plan, {**outcome, "changes": []}, {})  # a plain pass: nothing
    assert len(webhook.posts) == 1
    text = webhook.posts[0]["json"]["text"]
    assert "[gpu-a] ssd @ 16 GPUs, images/s: change point (regression) -9.8%" in text
    assert "FAILED" not in text and "sent once" in text


def test_a_slow_node_is_alerted_in_a_passing_week_and_rides_on_a_failure_alert(monkeypatch, tmp_path):
    from scalewatch.tasks.alert import send_alerts

    plan = slack_plan(tmp_path, cluster="gpu-a")
    line = "gpu-07 slowest in 4 of the last 5 runs, 12-18% behind"
    passing = {"passed": True, "failures": [], "inconclusive": [], "report": "/w/r/report.html", "slow_nodes": [line]}
    failure = scaling_failure(16, 0.6, 0.8)
    with WebhookReceiver() as webhook:
        slack_to(monkeypatch, webhook)
        send_alerts(plan, passing, {})
        send_alerts(plan, {**passing, "passed": False, "failures": [failure]}, {})
    texts = [p["json"]["text"] for p in webhook.posts]
    assert len(texts) == 2
    assert "slow node(s) on cluster gpu-a" in texts[0] and line in texts[0]
    assert "scaling check FAILED" in texts[1] and f"slow node: {line}" in texts[1]


def test_a_passing_run_with_a_read_too_short_for_a_rate_sends_no_failure_alert(monkeypatch, tmp_path):
    """Issue 49 item 3: the figure is INCONCLUSIVE (the outcome lists it as such, the overview says so:
    tests/bench/analysis/history/test_overview.py), never a FAILED alert; a failure beside it carries it
    as an INCONCLUSIVE item."""
    import pandas as pd

    from bench.analysis.verdict.evaluate import figure_warnings, inconclusive_figures
    from bench.analysis.verdict.expectations import BANDWIDTH_NOT_CACHE_DISTORTED
    from bench.metrics.summary import bandwidth_note
    from scalewatch.tasks.alert import send_alerts

    plan = slack_plan(tmp_path)
    short = {"cache_distorted": False, "seconds": 4.3, "bytes_from_storage": 1.0, "bytes_consumed": 1.0}
    note = bandwidth_note(short, synthetic=False, risk=False, drop="done")
    frame = pd.DataFrame([{"workload": "ssd", "gpus": 1, "bandwidth_note": note}])
    warning = {"workload": "ssd", "gpus": 1, "expectation": BANDWIDTH_NOT_CACHE_DISTORTED, "value": False}
    figures = inconclusive_figures(figure_warnings([warning], frame))
    passing = {
        "passed": True,
        "verdict": "PASSED",
        "failures": [],
        "inconclusive": [],
        "inconclusive_figures": figures,
        "report": "/w/r/report.html",
    }
    failure = scaling_failure(2, 0.3, 0.9)
    with WebhookReceiver() as webhook:
        slack_to(monkeypatch, webhook)
        send_alerts(plan, passing, {})
        assert webhook.posts == []  # no failure alert for a passing run
        send_alerts({**plan, "suite_run_id": "r2"}, {**passing, "passed": False, "failures": [failure]}, {})
    assert figures[0]["figure"] == "epoch-1 read rate" and "too short for a rate" in figures[0]["reason"]
    (post,) = webhook.posts
    lines = post["json"]["text"].splitlines()
    assert "scaling check FAILED" in lines[0] and "1 inconclusive figure(s)" in lines[0], lines[0]
    assert any(line.startswith("• ssd @ 1 GPUs: epoch-1 read rate INCONCLUSIVE") for line in lines), lines
    assert not any("ssd @ 1 GPUs" in line and "FAILED" in line for line in lines), lines
