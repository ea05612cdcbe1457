"""A deployment's start-up check (issue 50): what a team must set, checked before the scheduler takes a run, each
missing piece named, so that a deployment missing a secret or a connection fails when it starts, not at its
first weekly run. Run once per start, after `airflow db migrate` and before the components
(`python -m scalewatch.preflight`; docs/deploy.md): it exits 1 with one line per problem, else 0.

It checks: the JWT secret every component signs and checks tokens with; the suite folder (SCALEWATCH_SUITES)
and every file in it; every connection a suite names (the cluster's ssh or Slurm login node, Slack, SMTP); the
results database (the `scalewatch_results` connection or SCALEWATCH_RESULTS_URL), which it opens, bringing its
schema up to this version (Alembic: where an upgrade's migration runs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The fields of a suite that name an Airflow connection: the field, what it is for.
CONNECTION_FIELDS = {
    "conn_id": "the cluster's ssh hosts or Slurm login node",
    "slack_conn_id": "Slack alerts",
    "smtp_conn_id": "e-mail alerts",
    "aws_conn_id": "the S3 store the data is staged into",
}


def problems() -> list[str]:
    """Every missing or broken piece, one line each, naming the variable, file, field or connection."""
    found = secrets_missing()
    suites, suite_problems = suites_checked()
    found += suite_problems
    for path, field, conn_id in connections_named(suites):
        if not connection_exists(conn_id):
            found.append(
                f"{path}: {field} names the connection {conn_id!r} ({CONNECTION_FIELDS[field]}), which is not "
                f"defined (an AIRFLOW_CONN_{conn_id.upper()} variable, a secrets backend or `airflow connections add`)"
            )
    found += results_store_problems()
    return found


# Secrets every component must share, as the environment gives them (the variable, or its _CMD / _SECRET form).
# Not read from airflow.cfg: Airflow writes a random one into each airflow.cfg it creates, so containers that
# each made their own would all pass a check there and still refuse each other's tokens.
SHARED_SECRETS = {
    "AIRFLOW__API_AUTH__JWT_SECRET": "the secret the api-server signs tokens with and every component checks them by",
}


def secrets_missing() -> list[str]:
    return [
        f"{name} is not set ({what}): set one value for every component (or {name}_CMD / {name}_SECRET)"
        for name, what in SHARED_SECRETS.items()
        if not any(os.environ.get(name + form) for form in ("", "_CMD", "_SECRET"))
    ]


def suites_checked() -> tuple[list, list[str]]:
    from bench.suite_files import load_suites
    from scalewatch.params import check_suite_values

    folder = os.environ.get("SCALEWATCH_SUITES")
    if not folder:
        return [], ["SCALEWATCH_SUITES is not set: the folder of suite files (one DAG each) a deployment runs"]
    if not Path(folder).is_dir():
        return [], [f"SCALEWATCH_SUITES={folder}: no such folder"]
    suites, errors = load_suites(Path(folder), check_suite_values)
    return suites, list(errors.values())


def connections_named(suites) -> list[tuple[Path, str, str]]:
    return [(s.path, f, s.defaults[f]) for s in suites for f in CONNECTION_FIELDS if s.defaults.get(f)]


def connection_exists(conn_id: str) -> bool:
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def results_store_problems() -> list[str]:
    """The results database is set and opens (which migrates it to this version's schema)."""
    from scalewatch.paths import RESULTS_CONN_ID

    conn_id = os.environ.get("SCALEWATCH_RESULTS_CONN_ID", RESULTS_CONN_ID)
    if not connection_exists(conn_id) and not os.environ.get("SCALEWATCH_RESULTS_URL"):
        return [
            f"the results database: neither the connection {conn_id!r} nor SCALEWATCH_RESULTS_URL is set "
            "(without one, each worker would keep its own SQLite history)"
        ]
    from bench.store.db import ResultsStore
    from scalewatch.paths import results_url

    try:
        ResultsStore(results_url()).engine.dispose()
    except Exception as error:  # unreachable, refused, a newer schema: named, never a traceback at start
        where = f"connection {conn_id!r}" if connection_exists(conn_id) else "SCALEWATCH_RESULTS_URL"
        return [f"the results database ({where}) does not open: {type(error).__name__}: {str(error)[:300]}"]
    return []


def main() -> int:
    found = problems()
    for line in found:
        print(f"scalewatch preflight: {line}", file=sys.stderr)
    if found:
        return 1
    print("scalewatch preflight: ok (secrets, suites, their connections and the results database)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
