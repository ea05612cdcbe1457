"""Where the suite keeps its files on the Airflow side: one definition for the DAG and the report view."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> str:
    return os.environ.get("SCALEWATCH_HOME", os.path.join(os.getcwd(), "scalewatch-home"))


def output_dir() -> str:
    return os.environ.get("SCALEWATCH_OUTPUT_DIR", os.path.join(home(), "runs"))


def results_url() -> str:
    return os.environ.get("SCALEWATCH_RESULTS_URL", f"sqlite:///{home()}/results.db")


def reports_root() -> Path:
    return Path(output_dir()).resolve()
