"""scripts/airflow-ui.sh (issue 50): the UI's Airflow keeps its metadata on the local PostgreSQL the script
starts (never SQLite), prints the URL and where the password is, and stops that PostgreSQL when it stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.dags.conftest import ROOT

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_airflow_ui_runs_on_postgresql_prints_url_and_password_file_and_stops_it(tmp_path):
    pg_dir = Path(tempfile.mkdtemp(prefix="sw-ui-pg-", dir="/var/tmp"))  # the postgres user must reach it
    pg_dir.chmod(0o755)
    api_port, pg_port = _free_port(), _free_port()
    home = tmp_path / "home"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__DATABASE__", "AIRFLOW_HOME", "SCALEWATCH"))
    } | {
        "SCALEWATCH_SKIP_INSTALL": "1",
        "SCALEWATCH_HOME": str(home),
        "AIRFLOW_PG_DIR": str(pg_dir / "pg"),
        "AIRFLOW_PG_PORT": str(pg_port),
        "AIRFLOW__API__PORT": str(api_port),
        "SCALEWATCH_SCHEDULE": "none",
    }
    log = (tmp_path / "ui.log").open("w")
    ui = subprocess.Popen(
        [str(ROOT / "scripts" / "airflow-ui.sh")], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    metadata = None
    try:
        deadline = time.monotonic() + 240
        while not _answers(f"http://127.0.0.1:{api_port}/api/v2/monitor/health"):
            assert ui.poll() is None and time.monotonic() < deadline, (tmp_path / "ui.log").read_text()[-3000:]
            time.sleep(1)
        out = (tmp_path / "ui.log").read_text()
        password_file = home / "airflow" / "simple_auth_manager_passwords.json.generated"
        assert f"UI: http://localhost:{api_port}" in out and str(password_file) in out, out[-2000:]
        assert f"PostgreSQL on 127.0.0.1:{pg_port}, database airflow" in out
        # the server asks for the password the script made (scripts/airflow-pg.sh; tests/scripts/test_airflow_pg.py)
        password = (home / "airflow" / "postgres-password").read_text()
        metadata_url = f"postgresql+psycopg://postgres:{password}@127.0.0.1:{pg_port}/airflow"
        metadata = sa.create_engine(metadata_url)
        with metadata.connect() as conn:  # Airflow's tables are in PostgreSQL, and no SQLite file was made
            assert "dag_run" in sa.inspect(conn).get_table_names()
        assert not (home / "airflow" / "airflow.db").exists()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
        if metadata is not None:
            metadata.dispose()
    try:
        # the script's PostgreSQL went down with the UI (its EXIT trap), its data kept for the next start
        probe = sa.create_engine(metadata_url)  # with the password: refused only because the server is down
        with pytest.raises(sa.exc.OperationalError, match="Connection refused"), probe.connect():
            pass
        assert (pg_dir / "pg" / "data" / "PG_VERSION").is_file()
        stopped = subprocess.run(
            [str(ROOT / "scripts" / "airflow-ui.sh"), "stop"], env=env, capture_output=True, text=True, timeout=120
        )
        assert stopped.returncode == 0 and "stopped Airflow's PostgreSQL" in stopped.stdout, stopped.stderr
    finally:
        subprocess.run(["rm", "-rf", str(pg_dir)], check=False)
