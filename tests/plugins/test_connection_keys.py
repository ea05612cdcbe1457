"""Key material written for an SSH connection does not outlive the process that needed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key-but-secret-material\n-----END OPENSSH PRIVATE KEY-----"

SCRIPT = """
import json, os, sys
from scalewatch.connections import ssh_options
opts, host = ssh_options("sw_ssh")
print(json.dumps({"key": str(opts.key_file)}), flush=True)
if sys.argv[1] == "change":
    os.environ["AIRFLOW_CONN_SW_SSH"] = os.environ["AIRFLOW_CONN_SW_SSH"].replace("127.0.0.1", "127.0.0.2")
    again, _ = ssh_options("sw_ssh")
    print(json.dumps({"old_exists": os.path.exists(opts.key_file), "new": str(again.key_file)}), flush=True)
"""


def run(mode: str, tmp_path: Path) -> list[dict]:
    conn = {"conn_type": "ssh", "host": "127.0.0.1", "login": "root", "extra": {"private_key": KEY}}
    env = os.environ | {
        "AIRFLOW_CONN_SW_SSH": json.dumps(conn),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "PYTHONPATH": f"{ROOT / 'plugins'}{os.pathsep}{ROOT}",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_private_key_files_are_removed_when_the_process_exits(tmp_path):
    (first,) = run("once", tmp_path)
    assert first["key"].startswith("/") and not os.path.exists(first["key"])
    assert not Path(first["key"]).parent.exists()


def test_a_changed_connection_removes_the_old_key_at_once(tmp_path):
    first, second = run("change", tmp_path)
    assert second["old_exists"] is False and second["new"] != first["key"]
    assert not os.path.exists(second["new"])  # and the new one at exit
