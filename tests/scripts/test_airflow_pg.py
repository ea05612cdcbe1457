"""scripts/airflow-pg.sh (issue 61 item 8): the UI's PostgreSQL asks every connection for its password (no trust
on 127.0.0.1: another account on the machine is not its superuser), keeps its data in a folder of its own with
mode 700 (never a predictable name in /var/tmp), its password in a mode-600 file under the Airflow home, and
listens on 127.0.0.1 only. A real cluster, real connection attempts."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg(env: dict[str, str], call: str) -> subprocess.CompletedProcess:
    """scripts/airflow-pg.sh sourced as scripts/airflow-ui.sh does, then `call` (its output: stdout)."""
    script = f"set -euo pipefail; source scripts/airflow-pg.sh; {call}"
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.fixture
def base():
    """A folder the postgres user can reach (root runs the server as postgres): the test's SCALEWATCH_HOME."""
    path = Path(tempfile.mkdtemp(prefix="sw-airflow-pg-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(base: Path, port: int) -> dict[str, str]:
    home = base / "home"
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SCALEWATCH", "PG"))}
    return keep | {"SCALEWATCH_HOME": str(home), "AIRFLOW_HOME": str(home / "airflow"), "AIRFLOW_PG_PORT": str(port)}


def test_every_connection_needs_the_password_kept_600_and_the_data_folder_is_700(base):
    port = _free_port()
    env = _env(base, port)
    started = _pg(env, '_start_airflow_pg; printf %s "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"')
    try:
        assert started.returncode == 0, started.stderr
        pg_dir = base / "home" / "airflow-pg"  # the default: under SCALEWATCH_HOME, no fixed /var/tmp name
        password_file = base / "home" / "airflow" / "postgres-password"
        password = password_file.read_text()
        assert len(password) >= 32 and started.stdout.endswith(f"postgres:{password}@127.0.0.1:{port}/airflow")
        for folder in (pg_dir, pg_dir / "data"):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        info = password_file.stat()
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
        # a real attempt without the password, with a wrong one, and over the socket: each refused
        for host, given in (("127.0.0.1", None), ("127.0.0.1", "not-the-password"), (str(pg_dir), None)):
            kwargs = {"password": given} if given else {}
            with pytest.raises(psycopg.OperationalError, match=r"no password supplied|password authentication failed"):
                psycopg.connect(host=host, port=port, user="postgres", dbname="airflow", connect_timeout=10, **kwargs)
        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", password=password, dbname="airflow") as conn:
            assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        # a second start (the UI again) reuses the cluster and its password
        again = _pg(env, '_start_airflow_pg; printf %s "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"')
        assert again.returncode == 0 and again.stdout == started.stdout, again.stderr
    finally:
        _pg(env, "_stop_airflow_pg")


def test_a_link_at_the_data_folder_is_refused_before_anything_is_made(base):
    """A name someone else made first (here a link to a folder of theirs): refused, nothing written there."""
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    (base / "home").mkdir()
    (base / "home" / "airflow-pg").symlink_to(elsewhere)
    done = _pg(_env(base, _free_port()), "_start_airflow_pg")
    assert done.returncode == 1
    assert "airflow-pg: " in done.stderr and "is not a folder of" in done.stderr, done.stderr
    assert list(elsewhere.iterdir()) == [] and not (base / "home" / "airflow" / "postgres-password").exists()
