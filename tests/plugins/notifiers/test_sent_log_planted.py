"""A planted alert log never silences a run's alert (issue 61, item 5).

The alert task skips a target that its log (`alerts-sent.json` in the run folder) says already has the
message: a retry must not send the e-mail twice. The run folder may be on storage a node's root
writes, so a log someone planted there (one naming the alert by the ids anyone can compute, a link to a
genuine log, a FIFO, an oversized or malformed file) must leave the alert sent, to a real webhook
receiver, without hanging; the log the task wrote itself still keeps a retry from sending twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from bench.suite.plan import suite_dir
from scalewatch.notifiers.sent import MAX_BYTES, SENT_FILE, SentLog
from scalewatch.tasks.alert import _messages, links, send_alerts
from scalewatch.tasks.plan import sweep_config
from tests.infra.receivers import WebhookReceiver
from tests.plugins.tasks.test_alert import scaling_failure, slack_plan, slack_to

TARGET = "slack:sw_t_slack"  # the one target of slack_plan, as deliveries are recorded
OUTCOME = {"passed": False, "failures": [scaling_failure(2, 0.6, 0.8)], "inconclusive": [], "report": "/w/report.html"}


def alert(plan: dict) -> tuple[str, str]:
    """(subject, text) of the run's alert: all anyone who reads the run folder can work out."""
    cfg = sweep_config(plan)
    ((subject, text),) = _messages(cfg, plan["suite_run_id"], OUTCOME, links(cfg, plan["suite_run_id"], {}))
    return subject, text


def unkeyed_id(subject: str, text: str, length: int) -> str:
    """The message's name as a planter can compute it: its digest, at the log's old (24) or new (32) length."""
    return hashlib.sha256(f"{subject}\0{text}".encode()).hexdigest()[:length]


def genuine_log(folder: Path, subject: str, text: str) -> Path:
    """A log the alert task itself wrote for this very message (another run folder's, say)."""
    folder.mkdir(parents=True, exist_ok=True)
    SentLog(folder).add(TARGET, subject, text)
    return folder / SENT_FILE


def plant_computed(log: Path, subject: str, text: str, other: Path) -> None:
    log.write_text(json.dumps({unkeyed_id(subject, text, 32): [TARGET]}))  # the shape a genuine log has


def plant_computed_old(log: Path, subject: str, text: str, other: Path) -> None:
    log.write_text(json.dumps({unkeyed_id(subject, text, 24): [TARGET]}))  # the id before issue 61


def plant_link(log: Path, subject: str, text: str, other: Path) -> None:
    log.symlink_to(genuine_log(other, subject, text))


def plant_oversized(log: Path, subject: str, text: str, other: Path) -> None:
    genuine = genuine_log(other, subject, text).read_text()
    log.write_text(genuine + " " * MAX_BYTES)  # still valid JSON, past the bound


def plant_half_valid(log: Path, subject: str, text: str, other: Path) -> None:
    entries = json.loads(genuine_log(other, subject, text).read_text())
    log.write_text(json.dumps(entries | {"not-a-message-id": [TARGET], "0" * 32: "not a list"}))


def plant_deep(log: Path, subject: str, text: str, other: Path) -> None:
    log.write_text("[" * (MAX_BYTES - 1))  # deeper than json's parser recurses


PLANTS = {
    "computed-id": plant_computed,
    "computed-id-of-old": plant_computed_old,
    "link-to-a-genuine-log": plant_link,
    "oversized": plant_oversized,
    "half-valid": plant_half_valid,
    "nested-too-deep": plant_deep,
}


@pytest.mark.parametrize("plant", list(PLANTS), ids=list(PLANTS))
def test_a_planted_log_never_silences_the_alert(monkeypatch, tmp_path, plant):
    plan = slack_plan(tmp_path / "runs")
    out = suite_dir(Path(sweep_config(plan).output_dir), plan["suite_run_id"])
    out.mkdir(parents=True)
    PLANTS[plant](out / SENT_FILE, *alert(plan), tmp_path / "elsewhere")
    with WebhookReceiver() as webhook:
        slack_to(monkeypatch, webhook)
        send_alerts(plan, OUTCOME, {})
        assert len(webhook.posts) == 1, "a planted log silenced the alert"
        assert "scaling check FAILED" in webhook.posts[0]["json"]["text"]
        send_alerts(plan, OUTCOME, {})  # a retry: the task's own log (replacing the planted one) holds
    assert len(webhook.posts) == 1, "the retry sent the alert twice"
    assert not (out / SENT_FILE).is_symlink()


def test_a_fifo_as_the_log_is_neither_waited_on_nor_read(monkeypatch, tmp_path):
    """A FIFO whose writer would hand over a genuine log: the task opens it not at all (a reader that did
    would block until the writer came, then be silenced by it)."""
    plan = slack_plan(tmp_path / "runs")
    out = suite_dir(Path(sweep_config(plan).output_dir), plan["suite_run_id"])
    out.mkdir(parents=True)
    genuine = genuine_log(tmp_path / "elsewhere", *alert(plan)).read_bytes()
    fifo = tmp_path / "fifo"  # the same FIFO under a second name: the task's own log replaces the first
    os.mkfifo(fifo)
    os.link(fifo, out / SENT_FILE)
    writer = threading.Thread(target=lambda: fifo.write_bytes(genuine), daemon=True)
    writer.start()  # blocks in open() until a reader comes
    with WebhookReceiver() as webhook:
        slack_to(monkeypatch, webhook)
        send_alerts(plan, OUTCOME, {})
    assert len(webhook.posts) == 1, "a FIFO's writer silenced the alert"
    if writer.is_alive():  # let the writer's open() return: a reader that takes nothing, then EOF
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    writer.join()


def test_an_empty_airflow_secret_gives_no_key_a_planter_can_compute(monkeypatch, tmp_path):
    """`[api] secret_key` set empty: the ids under the key derived from "" are anyone's to compute, so
    they must name nothing (the process's own random key does instead)."""
    import hmac

    from scalewatch.notifiers.sent import KEY_LABEL

    monkeypatch.setenv("AIRFLOW__API__SECRET_KEY", "")
    plan = slack_plan(tmp_path / "runs")
    out = suite_dir(Path(sweep_config(plan).output_dir), plan["suite_run_id"])
    out.mkdir(parents=True)
    subject, text = alert(plan)
    public = hmac.new(b"", KEY_LABEL, hashlib.sha256).digest()
    planted = hmac.new(public, f"{subject}\0{text}".encode(), hashlib.sha256).hexdigest()[:32]
    (out / SENT_FILE).write_text(json.dumps({planted: [TARGET]}))
    with WebhookReceiver() as webhook:
        slack_to(monkeypatch, webhook)
        send_alerts(plan, OUTCOME, {})
    assert len(webhook.posts) == 1, "a log computed under an empty secret silenced the alert"
