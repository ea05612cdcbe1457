"""The store's schema revisions: Alembic's version table (never Airflow's), adopting a store the
hand-numbered migrations made, and one migrate() at a time on SQLite (a file lock)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from bench.store.engine import sqlite_file
from bench.store.errors import StoreSchemaError

MIGRATIONS = Path(__file__).with_name("migrations")


VERSION_TABLE = "scalewatch_alembic_version"  # never Airflow's alembic_version, when both share a database


LEGACY_TABLE = "scalewatch_schema"  # the hand-numbered migrations before Alembic


SCHEMA_REVISION = "0023"


# The hand-numbered store's versions and the revision each one equals once brought up to version 3
# (versions 1 and 2 are brought up to 3 by the legacy steps in `_adopt_legacy`).
LEGACY_REVISION = {3: "0001", 4: "0002"}


LEGACY_STEPS = (1, 2)


MIGRATION_LOCK_SUFFIX = ".migrate.lock"  # SQLite: the file beside the database that serialises migrate()


def alembic_config(conn: Connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("version_table", VERSION_TABLE)
    cfg.attributes["connection"] = conn
    return cfg


def current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def adopt_legacy(conn: Connection, cfg, shown: str) -> None:
    """A store made by the hand-numbered migrations: finish its steps up to 3, then stamp its revision.

    A version those migrations never wrote (hand-edited, or another tool's table) is refused before
    anything is changed: taking it as 0001 replays columns the store already has and crashes halfway."""
    from alembic import command

    tables = set(sa.inspect(conn).get_table_names())
    version = 1
    if LEGACY_TABLE in tables:
        version = int(conn.execute(sa.text(f"SELECT max(version) FROM {LEGACY_TABLE}")).scalar() or 1)
    if version not in LEGACY_STEPS and version not in LEGACY_REVISION:
        known = ", ".join(str(v) for v in sorted({*LEGACY_STEPS, *LEGACY_REVISION}))
        raise StoreSchemaError(
            f"results store {shown} claims hand-numbered schema version {version} in {LEGACY_TABLE}, which no "
            f"scalewatch wrote (known versions: {known}); refusing to guess its tables: restore the store "
            "from a backup or fix its version row"
        )
    if version < 2:  # the legacy steps this store had not applied yet, as they were
        conn.execute(
            sa.text("CREATE INDEX IF NOT EXISTS ix_results_history ON results (workload, gpus, cluster, started_at)")
        )
    if version < 3 and "config_key" not in {c["name"] for c in sa.inspect(conn).get_columns("results")}:
        conn.execute(sa.text("ALTER TABLE results ADD COLUMN config_key TEXT"))
    command.stamp(cfg, LEGACY_REVISION.get(version, LEGACY_REVISION[3]))


@contextlib.contextmanager
def migration_lock(engine: Engine) -> Iterator[None]:
    """SQLite: one migrate() at a time across processes, by flock on a file beside the database.

    SQLite's default (deferred) transactions do not cover Alembic's check-then-create: two first opens
    both saw an empty store and both created the version table (`table ... already exists`, `more than
    one head`). The migration's transaction now takes the write lock up front too (BEGIN IMMEDIATE,
    StoreConnection.migration_connection), which alone serialises every step migrate() takes; this lock
    is kept as a second guard (one small file beside the database). tests/bench/store/test_store_safety.py
    has a test of the pair (concurrent first opens) and one of this lock alone (a first open waits on it)."""
    path = sqlite_file(engine.url) if engine.dialect.name == "sqlite" else None
    if path is None:
        yield
        return
    fd = os.open(f"{path}{MIGRATION_LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
