"""Results store: SQLAlchemy over SQLite (default) or PostgreSQL, idempotent per (DAG, suite run,
workload, GPUs): two suite DAGs whose runs share a run id keep their own rows.

Schema changes are Alembic revisions (`bench/store/migrations/versions/`, version table
`scalewatch_alembic_version`); opening a store read-write (the suite's tasks, `bench sweep`) upgrades
it in place, in one transaction, keeping every row, one opener at a time (PostgreSQL: an advisory
lock; SQLite: a file lock beside the database). A store made by the hand-numbered migrations that
came before is adopted (stamped) first; a store newer than this code, or claiming a hand-numbered
version that never existed, is refused. The web pages open it read-only (`ResultsStore.open_read_only`):
they never migrate and never need write access.
"""

from __future__ import annotations

from bench.store.annotations import AnnotationRecords
from bench.store.environments import EnvironmentRecords
from bench.store.probes import ProbeRecords
from bench.store.results import ResultRecords
from bench.store.runs import RunQueries


class ResultsStore(ResultRecords, ProbeRecords, AnnotationRecords, EnvironmentRecords, RunQueries):
    """One store, its records kept by one class per kind (bench/store/results.py, probes.py, changes.py,
    annotations.py, environments.py, runs.py), over one connection (bench/store/connection.py).

    The store's location is passed where it is used (CLI flag, environment or Airflow connection),
    never carried in the run's config: a URL with a password must not reach XComs, logs or rows."""
