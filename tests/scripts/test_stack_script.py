"""scripts/stack.sh's input checks: refused at the edge, naming the variable, before any engine or build.

The stack itself (images, containers) is scripts/stack-check.sh's: too long for CI (docker/README.md).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "scripts" / "stack.sh"


def stack(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "SCALEWATCH_ADMIN_PASSWORD"}
    clean["SCALEWATCH_STACK_STATE"] = env.pop("state")
    return subprocess.run([str(STACK), *args], capture_output=True, text=True, env=clean | env, timeout=60, check=False)


@pytest.mark.parametrize(
    ("password", "message"),
    [(None, "SCALEWATCH_ADMIN_PASSWORD: required"), ("short", "SCALEWATCH_ADMIN_PASSWORD: 8 characters or more")],
)
def test_up_without_an_admin_password_is_refused_naming_it(tmp_path, password, message):
    env = {"SCALEWATCH_ADMIN_PASSWORD": password} if password is not None else {}
    done = stack("up", state=str(tmp_path), **env)
    assert done.returncode == 1
    assert message in done.stderr, done.stderr


def test_an_unknown_command_is_refused_with_the_allowed_ones(tmp_path):
    done = stack("restart", state=str(tmp_path))
    assert done.returncode == 1
    assert "usage: scripts/stack.sh up|down|build (got 'restart')" in done.stderr, done.stderr
