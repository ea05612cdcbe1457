"""Which alert target got which message of one suite run, kept in the run's folder (`alerts-sent.json`).

A retry of the alert task (after a Slack outage failed it) sends each message only to the targets that
lack it: the e-mail that already went is not sent twice. A message is known by its subject and text,
so a run evaluated again with another verdict is news again. The change notices are kept in the results
store instead (`change_deliveries`): their state outlives the run. Without a run folder (the suite
failed before it had one) nothing is kept and every try sends everything.

The run folder may be on storage the nodes write (a node's root, a shared NAS), so the log is trusted
for nothing but skipping a duplicate. It is read without following a link, never from a FIFO or device
(no hang), at most `MAX_BYTES`, and only in the exact shape this module writes; anything else counts
as empty. And a message is named by an HMAC of its subject and text under a key only the Airflow side
holds (derived from Airflow's `[api] secret_key`, which every component of a deployment shares): a log
planted by someone without that key names no message of the run, so it cannot silence the alert. Where
the key differs between tries (an Airflow without a written config makes one per process; an empty
secret gives each process a random key), a retry sends again: a message sent twice, never lost.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
from pathlib import Path

from bench.safe_fs import read_bounded, write_file

log = logging.getLogger(__name__)

SENT_FILE = "alerts-sent.json"  # not a name the report pages serve
# One run's log: a few messages times a few targets, some hundred bytes; a larger file is not this log.
MAX_BYTES = 64 << 10
MAX_TARGETS = 64  # per message; more names than any alert has targets is not this log either
MESSAGE_ID = re.compile(r"[0-9a-f]{32}")
KEY_LABEL = b"scalewatch alerts-sent v1"  # the purpose the Airflow secret is used for here


# With no Airflow secret (set empty), a key anyone could compute names nothing: this process's own instead.
PROCESS_KEY = os.urandom(32)


def _key() -> bytes:
    """This deployment's key for message ids: Airflow's `[api] secret_key`, through an HMAC with this
    use's label (the secret itself is never used as is, nor written anywhere)."""
    from airflow.configuration import conf

    secret = conf.get("api", "secret_key", fallback="") or ""
    return hmac.new(secret.encode(), KEY_LABEL, hashlib.sha256).digest() if secret else PROCESS_KEY


def message_id(subject: str, text: str) -> str:
    """The message's name in the log: only the holder of the key can name it (see the module's doc)."""
    return hmac.new(_key(), f"{subject}\0{text}".encode(), hashlib.sha256).hexdigest()[:32]


def parse_log(raw: bytes) -> dict[str, list[str]]:
    """The log's deliveries, if `raw` is exactly what `SentLog.add` writes; ValueError otherwise (a
    malformed log is never half-trusted)."""
    try:
        data = json.loads(raw.decode())
    except RecursionError:  # "[[[[...": nested deeper than the parser goes
        raise ValueError("nested too deep") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for key, targets in data.items():
        if not MESSAGE_ID.fullmatch(key):
            raise ValueError(f"{key[:40]!r} is not a message id")
        if not isinstance(targets, list) or len(targets) > MAX_TARGETS:
            raise ValueError(f"message {key}: not a list of at most {MAX_TARGETS} target names")
        if not all(isinstance(t, str) and t for t in targets):
            raise ValueError(f"message {key}: a target that is not a name")
    return data


class SentLog:
    def __init__(self, folder: Path | None) -> None:
        self.path = folder / SENT_FILE if folder is not None and folder.is_dir() else None
        self.sent: dict[str, list[str]] = self._read()

    def _read(self) -> dict[str, list[str]]:
        """The log as the last try left it. Missing, a link, a FIFO, too large or malformed counts as empty
        (a message sent twice, never lost); never followed, never waited on."""
        if self.path is None:
            return {}
        try:
            return parse_log(read_bounded(self.path.parent, SENT_FILE, MAX_BYTES))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:  # RefusedFile is an OSError; UnicodeDecodeError a ValueError
            log.warning("alert log %s not used (%s): every message counts as unsent", self.path, error)
            return {}

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
