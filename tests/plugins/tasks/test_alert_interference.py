"""A node a process keeps taking cores from (issue 62, item 5) is alerted in a passing week and rides on a
failure alert, delivered to a real webhook receiver (the outcome's `interfering_nodes`, bench.suite.record)."""

from __future__ import annotations

from tests.infra.receivers import WebhookReceiver
from tests.plugins.tasks.test_alert import scaling_failure, slack_plan, slack_to

LINE = "node gpu-07: `busy` took 30% of the ranks' cores in 3 of the last 5 runs"


def test_interference_on_a_node_is_alerted_in_a_passing_week_and_rides_on_a_failure_alert(monkeypatch, tmp_path):
    from scalewatch.tasks.alert import send_alerts

    plan = slack_plan(tmp_path, cluster="gpu-a")
    noisy = {"kind": "interference", "cluster": "gpu-a", "host": "gpu-07", "process": "busy", "line": LINE}
    passing = {"passed": True, "failures": [], "inconclusive": [], "report": "/w/r/report.html"}
    passing["interfering_nodes"] = [noisy]
    with WebhookReceiver() as webhook:
        slack_to(monkeypatch, webhook)
        send_alerts(plan, passing, {})
        send_alerts(plan, {**passing, "passed": False, "failures": [scaling_failure(16, 0.6, 0.8)]}, {})
    texts = [p["json"]["text"] for p in webhook.posts]
    assert len(texts) == 2
    assert "node interference on cluster gpu-a" in texts[0] and f"• {LINE}" in texts[0].splitlines()
    assert "scaling check FAILED" in texts[1] and f"• {LINE}" in texts[1].splitlines()
