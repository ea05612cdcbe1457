"""A deployment missing a secret or a connection fails at start naming it (issue 50): `python -m
scalewatch.preflight` against a real (migrated) Airflow metadata database and a real results store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SUITE = "description: a team suite\nschedule: null\nslack_conn_id: team_slack\nsmtp_conn_id: team_smtp\n"


def preflight(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scalewatch.preflight"], env=env, capture_output=True, text=True, timeout=300
    )


def test_preflight_names_each_missing_secret_folder_connection_and_store_then_passes(airflow_home, tmp_path):
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW_CONN_", "SCALEWATCH_RESULTS", "SCALEWATCH_SUITES", "AIRFLOW__API_AUTH__"))
    }
    bare = preflight(base)
    assert bare.returncode == 1
    assert "AIRFLOW__API_AUTH__JWT_SECRET is not set" in bare.stderr, bare.stderr
    assert "SCALEWATCH_SUITES is not set" in bare.stderr
    assert "neither the connection 'scalewatch_results' nor SCALEWATCH_RESULTS_URL is set" in bare.stderr

    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "team.yaml").write_text(SUITE)
    env = base | {
        "AIRFLOW__API_AUTH__JWT_SECRET": "preflight-test-secret",
        "SCALEWATCH_SUITES": str(suites),
        "AIRFLOW_CONN_TEAM_SLACK": json.dumps({"conn_type": "http", "host": "https://hooks.example.com"}),
        "SCALEWATCH_RESULTS_URL": f"sqlite:///{tmp_path}/results.db",
    }
    missing = preflight(env)
    assert missing.returncode == 1
    lines = [line for line in missing.stderr.splitlines() if line.startswith("scalewatch preflight:")]
    assert len(lines) == 1, missing.stderr  # only the one connection nobody defined
    assert f"{suites / 'team.yaml'}: smtp_conn_id names the connection 'team_smtp'" in lines[0]

    env["AIRFLOW_CONN_TEAM_SMTP"] = json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": 25})
    ok = preflight(env)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "scalewatch preflight: ok" in ok.stdout
    assert (tmp_path / "results.db").is_file()  # the store was opened, so migrated, at start

    env["SCALEWATCH_RESULTS_URL"] = "postgresql+psycopg://nobody@127.0.0.1:9/none"  # nothing listens on port 9
    down = preflight(env)
    assert down.returncode == 1 and "the results database (SCALEWATCH_RESULTS_URL) does not open" in down.stderr
