"""Airflow connections -> bench's typed options. Secrets stay in files mode 0600, never in logs."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from bench.config import HostSlots
from bench.launch.sshopts import SshOptions, known_hosts_line, write_private


def ssh_options(conn_id: str, hosts: tuple[HostSlots, ...] = ()) -> tuple[SshOptions, str | None]:
    """SshOptions from an SSH connection (key_file or private_key, host_key); also its host (login node).

    host_key in the connection extra pins the key of the connection's host; other hosts' keys come
    from extra `known_hosts` (text) or the system known_hosts. Host-key checking is never turned off.
    """
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson
    home = Path(tempfile.gettempdir()) / f"scalewatch-ssh-{hashlib.sha256(conn_id.encode()).hexdigest()[:12]}"
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
    return opts, conn.host or None
