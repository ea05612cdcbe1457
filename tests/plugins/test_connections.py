"""SSH options from a real Airflow connection (env-defined), used against real sshd hosts."""

from __future__ import annotations

import json
import os
import stat

import pytest

from bench.config.models import HostSlots
from bench.errors import LaunchError
from tests.infra.ssh_hosts import SshHosts

pytestmark = pytest.mark.slow


@pytest.fixture
def hosts(ssh_hosts) -> SshHosts:
    return ssh_hosts  # the session's (tests/conftest.py)


def connection(conn_id: str, hosts: SshHosts, host_key: str, monkeypatch) -> None:
    extra = {"private_key": hosts.client_key.read_text(), "host_key": host_key, "conn_timeout": 5}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "ssh", "host": hosts.ip(0), "port": 22, "login": "root", "extra": extra}),
    )


def test_connection_key_and_host_key_are_used(hosts, monkeypatch):
    from scalewatch.connections import ssh_options

    pub = (hosts.root / "host0_ed25519.pub").read_text().split()
    connection("sw_good", hosts, f"{pub[0]} {pub[1]}", monkeypatch)
    opts, login_host = ssh_options("sw_good")
    assert login_host == hosts.ip(0)
    assert stat.S_IMODE(os.stat(opts.key_file).st_mode) == 0o600
    opts.check_reachable((HostSlots(host=hosts.ip(0)),))


def test_wrong_host_key_in_connection_is_refused(hosts, monkeypatch):
    from scalewatch.connections import ssh_options

    other = (hosts.root / "host1_ed25519.pub").read_text().split()  # a real key, of another host
    connection("sw_bad", hosts, f"{other[0]} {other[1]}", monkeypatch)
    opts, _ = ssh_options("sw_bad")
    with pytest.raises(LaunchError, match=rf"host {hosts.ip(0)}.*Host key verification failed"):
        opts.check_reachable((HostSlots(host=hosts.ip(0)),))


def test_key_material_never_goes_to_a_folder_someone_else_planted(tmp_path, monkeypatch):
    import hashlib
    import tempfile
    from pathlib import Path

    from scalewatch.connections import ssh_options

    conn_id = "sw_planted"
    # The old, predictable location, pre-created by another local user: world-writable, a link inside.
    planted = Path(tempfile.gettempdir()) / f"scalewatch-ssh-{hashlib.sha256(conn_id.encode()).hexdigest()[:12]}"
    planted.mkdir(mode=0o777, exist_ok=True)
    planted.chmod(0o777)
    decoy = tmp_path / "attacker-known-hosts"
    decoy.write_text("attacker's keys\n")
    (planted / "known_hosts").unlink(missing_ok=True)
    (planted / "known_hosts").symlink_to(decoy)
    extra = {
        "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----",
        "host_key": "ssh-ed25519 AAAAC3Nza",
    }
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "ssh", "host": "10.213.7.10", "login": "root", "extra": extra}),
    )
    try:
        opts, _ = ssh_options(conn_id)
        home = Path(opts.key_file).parent
        assert home != planted and Path(opts.known_hosts_file).parent == home
        assert home.stat().st_uid == os.getuid() and stat.S_IMODE(home.stat().st_mode) == 0o700
        assert stat.S_IMODE(os.stat(opts.key_file).st_mode) == 0o600
        assert "10.213.7.10 ssh-ed25519 AAAAC3Nza" in Path(opts.known_hosts_file).read_text()
        assert decoy.read_text() == "attacker's keys\n"  # the planted link was never written through
    finally:
        (planted / "known_hosts").unlink(missing_ok=True)
        planted.rmdir()
