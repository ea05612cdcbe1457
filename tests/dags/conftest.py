"""An isolated Airflow home for DAG tests, migrated once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def airflow_env(home: Path) -> dict[str, str]:
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "SCALEWATCH_HOME": str(home / "sw"),
        "PYTHONPATH": str(ROOT / "plugins") + os.pathsep + str(ROOT),
    }


AIRFLOW_HOME_KEY = pytest.StashKey[Path]()


def set_session_airflow_home(config: pytest.Config) -> None:
    """Point this process's Airflow at a fresh home before anything imports Airflow (tests/conftest.py's
    pytest_configure). Airflow reads AIRFLOW_HOME once, at its first import: a test module importing it at
    collection, before a fixture set the home, left every later DAG test on an unmigrated database
    ("no such table: dag"), depending on which tests ran first."""
    home = Path(tempfile.mkdtemp(prefix="scalewatch-airflow-"))
    os.environ.update(airflow_env(home))
    config.stash[AIRFLOW_HOME_KEY] = home


@pytest.fixture(scope="session")
def airflow_home(pytestconfig) -> Path:
    """The session's Airflow home (set at configure time), migrated once when a test first needs it."""
    home = pytestconfig.stash[AIRFLOW_HOME_KEY]
    env = airflow_env(home)
    os.environ.update(env)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return home


def remove_session_airflow_home(config: pytest.Config) -> None:
    shutil.rmtree(config.stash[AIRFLOW_HOME_KEY], ignore_errors=True)
