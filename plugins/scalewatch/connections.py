"""Airflow connections -> bench's typed options. Secrets stay in private files, never in logs or XComs.

Resolved in whichever process builds the launcher (worker or triggerer), so key material is there
wherever the trigger runs; the files go to a folder created fresh and private (mkdtemp, mode 0700)
for this process, never to a predictable shared path another local user could plant first.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from bench.config.models import HostSlots
from bench.launch.sshopts import SshOptions, known_hosts_line, write_private

# Per process: one private folder per connection version, so each poll does not write keys anew.
_resolved: dict[str, tuple[SshOptions, str | None]] = {}
# conn_id -> (version, its private folder): a changed connection's old keys go at once, the rest at exit.
_folders: dict[str, tuple[str, Path]] = {}


def remove_key_folders() -> None:
    """Delete every private folder this process wrote key material to (at exit, or when done)."""
    for _, folder in _folders.values():
        shutil.rmtree(folder, ignore_errors=True)
    _folders.clear()
    _resolved.clear()


atexit.register(remove_key_folders)


def ssh_options(conn_id: str, hosts: tuple[HostSlots, ...] = ()) -> tuple[SshOptions, str | None]:
    """SshOptions from an SSH connection (key_file or private_key, host_key); also its host (login node).

    host_key in the connection extra pins the key of the connection's host; other hosts' keys come
    from extra `known_hosts` (text) or the system known_hosts. Host-key checking is never turned off.
    """
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson
    version = hashlib.sha256(
        json.dumps([conn_id, conn.host, conn.port, conn.login, extra], sort_keys=True, default=str).encode()
    ).hexdigest()
    if version in _resolved:
        return _resolved[version]
    if conn_id in _folders:  # the connection changed since: its old key material goes now
        old_version, old_home = _folders.pop(conn_id)
        _resolved.pop(old_version, None)
        shutil.rmtree(old_home, ignore_errors=True)
    home = Path(tempfile.mkdtemp(prefix="scalewatch-ssh-"))  # fresh, 0700, ours alone
    _folders[conn_id] = (version, home)
    key_file = extra.get("key_file")
    if extra.get("private_key"):
        key_file = str(write_private(home / "id", extra["private_key"].strip() + "\n"))
    known = ""
    if extra.get("host_key") and conn.host:
        known += known_hosts_line(conn.host, conn.port or 22, extra["host_key"])
    if extra.get("known_hosts"):
        known += extra["known_hosts"].strip() + "\n"
    known_file = str(write_private(home / "known_hosts", known)) if known else None
    opts = SshOptions(
        user=conn.login or None,
        key_file=key_file,
        known_hosts_file=known_file,
        port=conn.port or None,
        connect_timeout_s=int(extra.get("conn_timeout", 10)),
    )
    _resolved[version] = (opts, conn.host or None)
    return _resolved[version]
