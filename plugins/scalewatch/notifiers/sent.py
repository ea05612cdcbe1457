"""Which alert target got which message of one suite run, kept in the run's folder (`alerts-sent.json`).

A retry of the alert task (after a Slack outage failed it) sends each message only to the targets that
lack it: the e-mail that already went is not sent twice. A message is known by its subject and text,
so a run evaluated again with another verdict is news again. The change notices are kept in the results
store instead (`change_deliveries`): their state outlives the run. Without a run folder (the suite
failed before it had one) nothing is kept and every try sends everything.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from bench.safe_fs import write_file

log = logging.getLogger(__name__)

SENT_FILE = "alerts-sent.json"  # not a name the report pages serve


def message_id(subject: str, text: str) -> str:
    return hashlib.sha256(f"{subject}\0{text}".encode()).hexdigest()[:24]


class SentLog:
    def __init__(self, folder: Path | None) -> None:
        self.path = folder / SENT_FILE if folder is not None and folder.is_dir() else None
        self.sent: dict[str, list[str]] = self._read()

    def _read(self) -> dict[str, list[str]]:
        """The log as the last try left it; unreadable counts as empty (a message sent twice, never lost)."""
        if self.path is None or not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as error:
            log.warning("alert log %s unreadable (%s): every message counts as unsent", self.path, error)
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): [str(t) for t in v] for k, v in data.items() if isinstance(v, list)}

    def has(self, target: str, subject: str, text: str) -> bool:
        return target in self.sent.get(message_id(subject, text), [])

    def add(self, target: str, subject: str, text: str) -> None:
        """Record one delivery, written whole (a new file renamed over the old). A log that cannot be
        written is only logged: the delivery happened, and failing the task for it would send it again."""
        self.sent.setdefault(message_id(subject, text), []).append(target)
        if self.path is None:
            return
        try:
            write_file(self.path, json.dumps(self.sent, indent=1, sort_keys=True))
        except OSError as error:
            log.warning("alert log %s not written (%s): a retry may send this message again", self.path, error)
