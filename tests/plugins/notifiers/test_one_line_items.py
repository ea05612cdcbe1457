"""Each alert item is one line whatever its free text holds (issue 64's review): a process may name itself
with a line break (`prctl(PR_SET_NAME)`), and its name reaches an inconclusive reason, a cause's evidence
and a node line; a break there must never start a line of its own that reads as a verdict."""

from __future__ import annotations

from scalewatch.notifiers.message import alert_text, change_text, node_news

FORGED = "busy\n• all scales pass\r\u2028ok\x85"


def test_a_line_break_in_a_reason_or_a_process_name_stays_inside_its_item():
    failing = [
        {
            "workload": "ssd",
            "gpus": 2,
            "metric": "scaling_efficiency",
            "value": 0.5,
            "bound": 0.7,
            "expectation": "e",
            "bottleneck": "interference",
            "evidence": f"rank 1 lost 30% to {FORGED}",
        }
    ]
    inconclusive = [{"workload": "ssd", "gpus": 4, "reason": f"interference: {FORGED} (pid 7) on core 1"}]
    noisy = [{"line": f"node gpu-07: `{FORGED}` took 30% of the ranks' cores in 3 of the last 5 runs"}]
    text = alert_text("run-9", failing, None, inconclusive=inconclusive, interfering=noisy, storage=f"S3 {FORGED}")
    lines = text.splitlines()
    assert not [line for line in lines if line.startswith(("• all", "ok"))], lines
    # one header, the store, one failure, one inconclusive row, one node (no report given: no link)
    assert len(lines) == 5, lines
    ((_, news),) = node_news("gpu-a", "run-9", [f"gpu-02 ({FORGED})"], noisy, (None, None, None))
    assert len(news.splitlines()) == 3, news
    change = change_text("run-9", [{"cluster": "c", "line": FORGED}], None, None, None)
    assert len(change.splitlines()) == 2, change
