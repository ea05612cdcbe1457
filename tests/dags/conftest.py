"""An isolated Airflow home for DAG tests, migrated once per session."""

from __future__ import annotations

import os
import subprocess
import sys
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


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("airflow")
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
