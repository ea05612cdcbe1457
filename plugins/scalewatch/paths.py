"""Where the suite keeps its files on the Airflow side: one definition for the DAG and the report view."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> str:
    return os.environ.get("SCALEWATCH_HOME", os.path.join(os.getcwd(), "scalewatch-home"))


def output_dir() -> str:
    return os.environ.get("SCALEWATCH_OUTPUT_DIR", os.path.join(home(), "runs"))


RESULTS_CONN_ID = "scalewatch_results"


def results_url() -> str:
    """The results store, resolved where it is used and never put into a run's config or XComs.

    An Airflow connection `scalewatch_results` (postgres or sqlite; its password stays in Airflow's
    secrets and is masked in logs) wins; then SCALEWATCH_RESULTS_URL; then SQLite under the home.
    """
    url = _from_connection(os.environ.get("SCALEWATCH_RESULTS_CONN_ID", RESULTS_CONN_ID))
    return url or os.environ.get("SCALEWATCH_RESULTS_URL") or f"sqlite:///{home()}/results.db"


def _from_connection(conn_id: str) -> str | None:
    import contextlib

    from sqlalchemy.engine import URL

    conn = None
    with contextlib.suppress(Exception):  # not defined (AirflowNotFoundException) or no Airflow here
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
    if conn is None:
        return None
    if conn.conn_type == "sqlite":
        return f"sqlite:///{conn.host}"
    return URL.create(
        "postgresql+psycopg",
        username=conn.login or None,
        password=conn.password or None,
        host=conn.host or None,
        port=conn.port or None,
        database=conn.schema or None,
    ).render_as_string(hide_password=False)


def suites_dir() -> Path:
    """Where suite files live: SCALEWATCH_SUITES, else `suites/` in the project."""
    default = Path(__file__).resolve().parents[2] / "suites"
    return Path(os.environ.get("SCALEWATCH_SUITES") or default)


def reports_root() -> Path:
    return Path(output_dir()).resolve()
