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

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from bench.errors import ConfigError
from bench.results.schema import (
    ALERTED,
    CHANGE_KEY,
    KEY,
    METRICS,
    PENDING,
    RESULT_COLUMNS,
    SERIES_KEY,
    STORE_KEY,
    WITHHELD,
    Column,
)

metadata = sa.MetaData()

# A run nobody scheduled (a triggered run, `bench sweep`): what a results row says when its suite run names
# no run type. Airflow's own run types ("scheduled", "manual", "backfill", "asset_triggered") are kept as they are.
MANUAL = "manual"

_SQL_TYPES = {"int": sa.Integer, "float": sa.Float, "bool": sa.Boolean, "text": sa.Text}


def _results_column(c: Column) -> sa.Column:
    if c.name == "dag_id":  # '' for `bench sweep`: part of the key since revision 0008
        return sa.Column(c.name, sa.Text, nullable=False, server_default="")
    return sa.Column(c.name, _SQL_TYPES[c.dtype], nullable=c.name not in KEY)


# Every stored column of bench/results/schema.py, in its order; the schema's revisions are Alembic's.
results_table = sa.Table(
    "results",
    metadata,
    *(_results_column(c) for c in RESULT_COLUMNS if c.stored),
    sa.PrimaryKeyConstraint(*STORE_KEY, name="results_pkey"),
)
RESULTS_KEY = list(STORE_KEY)

probes_table = sa.Table(
    "storage_probes",
    metadata,
    sa.Column("suite_run_id", sa.Text, primary_key=True),
    sa.Column("cluster", sa.Text),
    sa.Column("probed_at", sa.Text),
    sa.Column("paths", sa.Text),
    sa.Column("ceiling_mb_s", sa.Float),
    sa.Column("conclusive", sa.Boolean),
    sa.Column("reason", sa.Text),
    sa.Column("method", sa.Text),
    sa.Column("block_size", sa.Integer),
    sa.Column("sample_bytes", sa.Float),
    sa.Column("levels", sa.Text),
    sa.Column("accepted", sa.Boolean),
)

suite_runs_table = sa.Table(
    "suite_runs",
    metadata,
    sa.Column("suite_run_id", sa.Text, nullable=False),
    sa.Column("started_at", sa.Text),
    sa.Column("cluster", sa.Text),
    sa.Column("passed", sa.Boolean),
    sa.Column("report_path", sa.Text),
    sa.Column("config", sa.Text),
    sa.Column("dag_id", sa.Text, nullable=False, server_default=""),  # '' for `bench sweep`
    sa.PrimaryKeyConstraint("dag_id", "suite_run_id", name="suite_runs_pkey"),
)
SUITE_RUNS_KEY = ["dag_id", "suite_run_id"]

change_alerts_table = sa.Table(
    "change_alerts",
    metadata,
    *(sa.Column(c, sa.Integer if c == "gpus" else sa.Text, primary_key=True) for c in CHANGE_KEY),
    *(sa.Column(c, sa.Text) for c in ("changed_in", "detected_at", "detected_in")),
    *(sa.Column(c, sa.Float) for c in ("before", "after", "change", "pvalue")),
    *(sa.Column(c, sa.Text) for c in ("state", "recovered_at", "recovered_in")),
    sa.Column("size", sa.Float),
    # how sure (issue 54, revision 0020): the drop's 95% interval (relative, positive: lower) and the runs
    # at the new level that confirmed it; NULL for change points E-Divisive found, or stored before
    *(sa.Column(c, sa.Float) for c in ("drop_ci_low", "drop_ci_high")),
    sa.Column("confirmed_runs", sa.Integer),
)

# Each suite run's environment fingerprint, one row per field (bench.env.fingerprint): Alembic 0009.
run_environment_table = sa.Table(
    "run_environment",
    metadata,
    sa.Column("dag_id", sa.Text, primary_key=True, server_default=""),
    sa.Column("suite_run_id", sa.Text, primary_key=True),
    sa.Column("field", sa.Text, primary_key=True),
    sa.Column("value", sa.Text),
)
ENVIRONMENT_KEY = ["dag_id", "suite_run_id", "field"]

# Which target each change point's notice reached (revision 0014): a retry of the alert task sends a
# notice only to the targets still missing it. `notice` is "change" or "recovered"; target ALL_TARGETS
# ('*') stands for every target (the change points alerted before per-target delivery was kept).
change_deliveries_table = sa.Table(
    "change_deliveries",
    metadata,
    *(sa.Column(c, sa.Integer if c == "gpus" else sa.Text, primary_key=True) for c in CHANGE_KEY),
    sa.Column("notice", sa.Text, primary_key=True),
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("sent_at", sa.Text),
    sa.Column("sent_in", sa.Text),  # the suite run whose alert task delivered it
)
ALL_TARGETS = "*"

# People's words on a change point (its key is the change point's), append-only since revision 0014:
# every word is kept with who, when and under which DAG; the newest one is the change point's
# annotation, and the series re-baselines from it.
annotations_table = sa.Table(
    "annotations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    *(sa.Column(c, sa.Integer if c == "gpus" else sa.Text, nullable=False) for c in CHANGE_KEY),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("note", sa.Text, nullable=False),
    sa.Column("author", sa.Text, nullable=False, server_default=""),
    sa.Column("created_at", sa.Text),
    sa.Column("dag_id", sa.Text, nullable=False, server_default=""),  # '' for a change of `bench sweep` runs
)
ANNOTATION_FIELDS = (*CHANGE_KEY, "kind", "note", "author", "dag_id")


MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "scalewatch_alembic_version"  # never Airflow's alembic_version, when both share a database
LEGACY_TABLE = "scalewatch_schema"  # the hand-numbered migrations before Alembic
SCHEMA_REVISION = "0021"
# The hand-numbered store's versions and the revision each one equals once brought up to version 3
# (versions 1 and 2 are brought up to 3 by the legacy steps in `_adopt_legacy`).
LEGACY_REVISION = {3: "0001", 4: "0002"}
LEGACY_STEPS = (1, 2)
MIGRATION_LOCK_SUFFIX = ".migrate.lock"  # SQLite: the file beside the database that serialises migrate()


class StoreSchemaError(ConfigError):
    """The store's schema is one this code cannot use (newer than it, unknown, or not at its head)."""


class StoreDowngradeRefused(StoreSchemaError):
    """A downgrade would drop a table or column that holds data (or merge rows): refused, nothing dropped."""


class StoreUnavailable(ConfigError):
    """The store cannot be opened as asked (a read-only open of a store that does not exist yet)."""


def _alembic_config(conn: Connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("version_table", VERSION_TABLE)
    cfg.attributes["connection"] = conn
    return cfg


def _current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def _adopt_legacy(conn: Connection, cfg, shown: str) -> None:
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


def shown_url(url: str) -> str:
    """The store's URL as it may be shown or stored anywhere: never with its password."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "(unparseable results URL)"


def check_url(url: str) -> str:
    """Only SQLite and PostgreSQL are supported; the error shows the URL without its password."""
    if not re.match(r"^(sqlite|postgresql(\+psycopg)?)://", url or ""):
        raise ConfigError(f"results URL {shown_url(url)}: must start with sqlite:// or postgresql[+psycopg]://")
    return url


def _sqlite_file(url: sa.engine.URL) -> Path | None:
    """The database file of a SQLite URL (None for an in-memory one)."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).absolute()


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """SQLite: one migrate() at a time across processes, by flock on a file beside the database.

    SQLite's own locks do not cover Alembic's check-then-create: two first opens both saw an empty
    store and both created the version table (`table ... already exists`, `more than one head`)."""
    path = _sqlite_file(engine.url) if engine.dialect.name == "sqlite" else None
    if path is None:
        yield
        return
    fd = os.open(f"{path}{MIGRATION_LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _read_only_engine(url: str) -> Engine:
    """An engine that cannot write: SQLite opened with mode=ro, PostgreSQL sessions read-only."""
    parsed = sa.engine.make_url(check_url(url))
    if parsed.get_backend_name() == "sqlite":
        path = _sqlite_file(parsed)
        if path is None:
            raise StoreUnavailable(f"results URL {shown_url(url)}: a read-only store needs a SQLite file")
        if not path.is_file():
            raise StoreUnavailable(
                f"results store {shown_url(url)} does not exist yet: the suite's tasks create it on their "
                "first run (the web pages only read it)"
            )
        ro = parsed.set(database=f"file:{quote(str(path))}", query={"mode": "ro", "uri": "true"})
        engine = sa.create_engine(ro, future=True)
        sa.event.listen(engine, "connect", _sqlite_read_pragmas)
        return engine
    return sa.create_engine(
        parsed, future=True, connect_args={"options": "-c default_transaction_read_only=on"}, pool_pre_ping=True
    )


class ResultsStore:
    """The store's location is passed where it is used (CLI flag, environment or Airflow connection),
    never carried in the run's config: a URL with a password must not reach XComs, logs or rows."""

    read_only = False
    _unit: Connection | None = None  # the connection of the open `transaction()`, if any

    def __init__(self, url: str) -> None:
        self.engine: Engine = sa.create_engine(check_url(url), future=True)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self.migrate()

    @classmethod
    def open_read_only(cls, url: str) -> ResultsStore:
        """The store for pages that only show it: never migrates, cannot write, refuses a schema that is not
        this code's head (StoreSchemaError) or a store that does not exist (StoreUnavailable)."""
        store = cls.__new__(cls)
        store.engine = _read_only_engine(url)
        store.read_only = True
        try:
            store.check_head()
        except sa.exc.OperationalError as error:
            store.engine.dispose()
            raise StoreUnavailable(f"results store {shown_url(url)} cannot be opened read-only: {error.orig}") from None
        except StoreSchemaError:
            store.engine.dispose()
            raise
        return store

    @classmethod
    def open_at_head(cls, url: str) -> ResultsStore:
        """A writable store that never migrates (the web server's annotations): refuses one not at head."""
        store = cls.__new__(cls)
        store.engine = sa.create_engine(check_url(url), future=True)
        if store.engine.dialect.name == "sqlite":
            sa.event.listen(store.engine, "connect", _sqlite_pragmas)
        try:
            store.check_head()
        except (StoreSchemaError, sa.exc.OperationalError):
            store.engine.dispose()
            raise
        return store

    def change_point(self, key: dict) -> dict | None:
        """The stored change point with this key (CHANGE_KEY fields), with the DAG of the run it happened in."""
        t = change_alerts_table
        query = sa.select(t, suite_runs_table.c.dag_id).outerjoin(
            suite_runs_table, suite_runs_table.c.suite_run_id == t.c.changed_in
        )
        for name in CHANGE_KEY:
            query = query.where(t.c[name] == key[name])
        with self._connect() as conn:
            row = conn.execute(query).mappings().first()
        return dict(row) if row is not None else None

    def check_head(self) -> None:
        """StoreSchemaError unless the store is at this code's head revision; reads one row."""
        with self.engine.connect() as conn:
            current = _current_revision(conn)
        if current != SCHEMA_REVISION:
            raise StoreSchemaError(
                f"results store {shown_url(str(self.engine.url))} is at schema revision {current!r}, and this "
                f"scalewatch reads {SCHEMA_REVISION!r}: the pages never migrate it; the suite's tasks (or "
                "`bench sweep`) upgrade it when they next open it, a newer store needs this scalewatch upgraded"
            )

    def migrate(self) -> str:
        """Bring the store to this code's Alembic head, keeping every row; refuse a newer store."""
        import logging

        from alembic import command
        from alembic.script import ScriptDirectory
        from alembic.util.exc import CommandError

        if self.read_only:
            raise StoreSchemaError(f"results store {shown_url(str(self.engine.url))} was opened read-only")
        # Alembic narrates every open at INFO ("Context impl SQLiteImpl"): noise in a user's terminal.
        logging.getLogger("alembic").setLevel(logging.WARNING)
        with _migration_lock(self.engine), self.migration_connection() as conn:
            if self.engine.dialect.name == "postgresql":  # concurrent first opens: one migrates
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(724101)"))
            cfg = _alembic_config(conn)
            current = _current_revision(conn)
            if current is None and "results" in sa.inspect(conn).get_table_names():
                _adopt_legacy(conn, cfg, shown_url(str(self.engine.url)))
                current = _current_revision(conn)
            if current is not None:
                try:
                    ScriptDirectory.from_config(cfg).get_revision(current)
                except CommandError:
                    raise StoreSchemaError(
                        f"results store {shown_url(str(self.engine.url))} is at schema revision {current!r}, "
                        f"which this scalewatch does not know (its newest is {SCHEMA_REVISION!r}): it was "
                        "written by a newer scalewatch; upgrade scalewatch before using this store"
                    ) from None
            command.upgrade(cfg, "head")
        return SCHEMA_REVISION

    @contextlib.contextmanager
    def migration_connection(self) -> Iterator[Connection]:
        """A connection in one real transaction, DDL included, for Alembic: a refused or failed step
        leaves the store as it was. pysqlite commits DDL on its own outside a transaction it began, so
        SQLite gets its own short-lived engine that issues BEGIN IMMEDIATE (the write lock up front)."""
        if self.engine.dialect.name != "sqlite" or _sqlite_file(self.engine.url) is None:  # in-memory: one DB
            with self.engine.begin() as conn:
                yield conn
            return
        engine = sa.create_engine(self.engine.url, poolclass=sa.pool.NullPool)

        def autocommit_driver(dbapi_conn, record) -> None:
            dbapi_conn.isolation_level = None  # the driver begins nothing itself; BEGIN below covers DDL
            _sqlite_pragmas(dbapi_conn, record)

        sa.event.listen(engine, "connect", autocommit_driver)
        sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        try:
            with engine.begin() as conn:
                yield conn
        finally:
            engine.dispose()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Every read and write of this store inside the block runs in one transaction: committed when the
        block ends, rolled back when it raises. `bench.suite.record` stores a run's rows, probe,
        environment and change points this way, so a crash leaves all of them or none; reads inside see
        the block's own writes (the change watch reads the run it just stored). Nested blocks join it."""
        if self._unit is not None:
            yield
            return
        with self.engine.begin() as conn:
            self._unit = conn
            try:
                yield
            finally:
                self._unit = None

    @contextlib.contextmanager
    def _begin(self) -> Iterator[Connection]:
        """A connection for writes: the open transaction's, else one that commits when the block ends."""
        if self._unit is not None:
            yield self._unit
            return
        with self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        """A connection for reads: the open transaction's (which sees its own writes), else a fresh one."""
        if self._unit is not None:
            yield self._unit
            return
        with self.engine.connect() as conn:
            yield conn

    def schema_version(self) -> str | None:
        with self.engine.connect() as conn:
            return _current_revision(conn)

    def upsert(self, frame: pd.DataFrame, suite: dict | None = None) -> int:
        """Replace this suite run's rows: a rerun overwrites, never duplicates; one transaction.

        The rows belong to `suite`'s DAG ('' without one: `bench sweep`): another DAG's run with the same
        run id is neither overwritten nor swept as stale."""
        dag_id = (suite or {}).get("dag_id") or ""
        run_type = (suite or {}).get("run_type") or MANUAL
        rows = [_row(r) | {"dag_id": dag_id, "run_type": run_type} for r in frame.to_dict("records")]
        with self._begin() as conn:
            ids = {r["suite_run_id"] for r in rows}
            if rows:  # one executemany statement: 52,000 history rows took 44 s row by row
                conn.execute(self._upsert(results_table, rows[0], RESULTS_KEY), rows)
            if suite is not None:
                suite = {k: v for k, v in suite.items() if k != "run_type"} | {"dag_id": dag_id}
                conn.execute(self._upsert(suite_runs_table, suite, SUITE_RUNS_KEY), [suite])
            # rows of this suite run that the rerun no longer has (a scale removed) go too
            for sid in ids:
                keep = [(r["workload"], r["gpus"]) for r in rows if r["suite_run_id"] == sid]
                stale = sa.and_(
                    results_table.c.dag_id == dag_id,
                    results_table.c.suite_run_id == sid,
                    sa.not_(sa.tuple_(results_table.c.workload, results_table.c.gpus).in_(keep)),
                )
                conn.execute(results_table.delete().where(stale))
        return len(rows)

    def _insert(self, table: sa.Table):
        """The dialect's INSERT, which knows ON CONFLICT."""
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(table)

    def _upsert(self, table: sa.Table, row: dict, key: list[str]):
        """INSERT .. ON CONFLICT (key) DO UPDATE over `row`'s columns; values are bound at execute."""
        stmt = self._insert(table)
        return stmt.on_conflict_do_update(index_elements=key, set_={k: stmt.excluded[k] for k in row if k not in key})

    def frame(self, where=None) -> pd.DataFrame:
        query = sa.select(results_table)
        if where is not None:
            query = query.where(where)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(results_table.c.started_at), conn)

    def history_values(
        self,
        frame: pd.DataFrame,
        runs: int,
        exclude_suite: str,
        since: list[str | None] | None = None,
        column: str = "throughput_img_s",
        dag_ids: Iterable[str] | None = None,
        until: list[str | None] | None = None,
    ) -> list[list[float]]:
        """`column` (throughput by default; a checkpoint MB/s) of the last `runs` accepted runs of each row's
        series (workload, GPUs, cluster, config) that have it, from `since[i]` on where a row's series was
        re-baselined by an annotated change. `dag_ids`: only rows of these DAGs (a page's readable ones:
        nothing it derives may come from a DAG its user cannot read); None: every DAG that runs the series
        (the weekly check's own history). `until[i]`: only runs started at or before it (a comparison's
        later run: the history as it stood then, not runs stored since)."""
        t = results_table
        figure = t.c[column]
        of_dags = t.c.dag_id.in_(list(dag_ids)) if dag_ids is not None else sa.true()
        out: list[list[float]] = []
        with self._connect() as conn:
            for i, (_, row) in enumerate(frame.iterrows()):
                start = since[i] if since is not None else None
                end = until[i] if until is not None else None
                q = (
                    sa.select(figure)
                    .where(
                        t.c.workload == row["workload"],
                        t.c.gpus == int(row["gpus"]),
                        t.c.cluster == row["cluster"],
                        t.c.config_key == row["config_key"],
                        t.c.accepted.is_(True),
                        t.c.suite_run_id != exclude_suite,
                        figure.is_not(None),
                        t.c.started_at >= start if start is not None else sa.true(),
                        t.c.started_at <= end if end is not None else sa.true(),
                        of_dags,
                    )
                    .order_by(t.c.started_at.desc())
                    .limit(runs)
                )
                out.append([float(v) for v in conn.execute(q).scalars()])
        return out

    def history_median(self, frame: pd.DataFrame, runs: int, exclude_suite: str) -> pd.Series:
        """Median throughput of the last `runs` accepted runs per row's series, aligned to frame."""
        values = self.history_values(frame, runs, exclude_suite)
        return pd.Series([float(np.median(v)) if v else np.nan for v in values], index=frame.index, dtype=float)

    def upsert_probe(self, row: dict) -> None:
        """One probe per suite run: a rerun replaces it, never adds a second."""
        row = {**row, "levels": json.dumps(row["levels"]), "paths": json.dumps(row["paths"])}
        with self._begin() as conn:
            conn.execute(self._upsert(probes_table, row, ["suite_run_id"]), [row])

    def probes(self, cluster: str | None = None) -> pd.DataFrame:
        query = sa.select(probes_table)
        if cluster is not None:
            query = query.where(probes_table.c.cluster == cluster)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(probes_table.c.probed_at), conn)

    def probe_history(
        self, cluster: str, paths: list[str], sample_bytes: float, runs: int, exclude_suite: str
    ) -> list[float]:
        """Ceilings of the last `runs` accepted probes of the same files on this cluster: same paths and
        the same sampled bytes (a dataset re-staged at another size under one path is another workload
        for fio: 48 small files and 1,536 of them differed by 35% on one disk)."""
        t = probes_table
        q = (
            sa.select(t.c.ceiling_mb_s)
            .where(
                t.c.cluster == cluster,
                t.c.paths == json.dumps(paths),
                t.c.sample_bytes == float(sample_bytes),
                t.c.accepted.is_(True),
                t.c.suite_run_id != exclude_suite,
            )
            .order_by(t.c.probed_at.desc())
            .limit(runs)
        )
        with self._connect() as conn:
            return [float(v) for v in conn.execute(q).scalars() if v is not None]

    def accepted_series(self, cluster: str, workload: str, gpus: int, config_key: str) -> pd.DataFrame:
        """Every accepted run of one series, oldest first: the history its change points are found in."""
        t = results_table
        q = (
            sa.select(t)
            .where(
                t.c.cluster == cluster,
                t.c.workload == workload,
                t.c.gpus == int(gpus),
                t.c.config_key == config_key,
                t.c.accepted.is_(True),
            )
            .order_by(t.c.started_at)
        )
        with self._connect() as conn:
            return pd.read_sql(q, conn)

    def change_alerts(self, cluster: str | None = None, dag_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """The stored change points (of `cluster`). `dag_ids`: only those a page whose user reads these DAGs
        may derive a status from: a change point is kept when a results row of one of their stored runs,
        on its series, started at its `changed_at` (a series spans the DAGs that run it, so one found in
        another DAG's runs alone is not shown)."""
        c = change_alerts_table
        query = sa.select(c)
        if cluster is not None:
            query = query.where(c.c.cluster == cluster)
        if dag_ids is not None:
            t = results_table
            joined, allowed = self._of_runs(dag_ids)
            readable = (
                sa.select(sa.literal(1))
                .select_from(joined)
                .where(allowed, t.c.started_at == c.c.changed_at, *(t.c[k] == c.c[k] for k in SERIES_KEY))
            )
            query = query.where(readable.exists())
        with self._connect() as conn:
            return pd.read_sql(query.order_by(change_alerts_table.c.changed_at), conn)

    def upsert_change(self, row: dict) -> None:
        """One row per series change point: finding it again next week updates it, never adds one."""
        with self._begin() as conn:
            conn.execute(self._upsert(change_alerts_table, row, CHANGE_KEY), [row])

    def upsert_environment(self, dag_id: str | None, suite_run_id: str, fingerprint: dict[str, str]) -> None:
        """A suite run's fingerprint, field by field; a rerun of the run replaces it."""
        rows = [
            {"dag_id": dag_id or "", "suite_run_id": suite_run_id, "field": k, "value": str(v)}
            for k, v in fingerprint.items()
        ]
        if rows:
            with self._begin() as conn:
                conn.execute(self._upsert(run_environment_table, rows[0], ENVIRONMENT_KEY), rows)

    def environments(
        self, suite_run_ids: Iterable[str] | None = None, dag_ids: Iterable[str] | None = None
    ) -> dict[str, dict[str, str]]:
        """suite_run_id -> {field: value} (of the runs asked for, or all). `dag_ids`: only the fingerprints
        stored by runs of these DAGs ('' for `bench sweep`): two DAGs may hold runs of one suite run id (an
        Airflow run id such as scheduled__<date> is one per DAG), and a page shows only its readable DAGs'."""
        t = run_environment_table
        query = sa.select(t.c.suite_run_id, t.c.field, t.c.value)
        if suite_run_ids is not None:
            query = query.where(t.c.suite_run_id.in_(list(suite_run_ids)))
        if dag_ids is not None:
            query = query.where(t.c.dag_id.in_(list(dag_ids)))
        out: dict[str, dict[str, str]] = {}
        with self._connect() as conn:
            for sid, field, value in conn.execute(query):
                out.setdefault(sid, {})[field] = value
        return out

    def delivered(self, keys: Iterable[tuple]) -> dict[tuple, set[str]]:
        """(cluster, workload, gpus, config_key, metric, changed_at, notice) -> the targets that notice of that
        change point reached (ALL_TARGETS: every one), for the keys asked; a key nothing reached is absent."""
        wanted = {tuple(k) for k in keys}
        if not wanted:
            return {}
        t = change_deliveries_table
        columns = [*(t.c[c] for c in CHANGE_KEY), t.c.notice]
        query = sa.select(*columns, t.c.target).where(sa.tuple_(*columns).in_(sorted(wanted)))
        out: dict[tuple, set[str]] = {}
        with self._connect() as conn:
            for *key, target in conn.execute(query):
                out.setdefault(tuple(key), set()).add(target)
        return out

    def mark_delivered(self, notices: Iterable[dict], target: str, sent_in: str, targets: Iterable[str]) -> None:
        """`target` got these notices (change_alerts rows with their `kind`): kept per target, so that a retry
        of the alert task sends each only where it is still missing. A change point whose change notice has
        now reached every one of `targets` (the suite's alert targets) turns from pending to alerted. One
        transaction; marking twice changes nothing."""
        from datetime import UTC, datetime

        now = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [
            {c: n[c] for c in CHANGE_KEY} | {"notice": n["kind"], "target": target, "sent_at": now, "sent_in": sent_in}
            for n in notices
        ]
        if not rows:
            return
        t, everyone = change_deliveries_table, set(targets)
        with self._begin() as conn:
            conn.execute(self._insert(t).on_conflict_do_nothing(), rows)
            for row in rows:
                if row["notice"] != "change":
                    continue
                key = [t.c[c] == row[c] for c in CHANGE_KEY]
                got = set(conn.execute(sa.select(t.c.target).where(*key, t.c.notice == "change")).scalars())
                if ALL_TARGETS in got or everyone <= got:
                    a = change_alerts_table
                    conn.execute(
                        a.update()
                        .where(*(a.c[c] == row[c] for c in CHANGE_KEY), a.c.state == PENDING)
                        .values(state=ALERTED)
                    )

    def add_annotation(self, row: dict) -> dict:
        """Append one person's word on a change point; earlier words stay (the newest is the change point's
        annotation: `annotations`; all of them: `annotation_history`). `row` holds the change point's key
        (CHANGE_KEY), `kind`, `note`, `author` and `dag_id` (the DAG under whose permission it was made, ''
        for a change of `bench sweep` runs), and may hold `created_at` (now, UTC, when absent). Returns the
        stored row with its `id`. ConfigError names a missing field; nothing is stored then."""
        from datetime import UTC, datetime

        missing = [f for f in ANNOTATION_FIELDS if row.get(f) is None]
        if missing:
            raise ConfigError(f"annotation: missing field(s) {', '.join(missing)}")
        stored = {f: row[f] for f in ANNOTATION_FIELDS} | {
            "gpus": int(row["gpus"]),
            "created_at": row.get("created_at") or datetime.now(UTC).isoformat(timespec="seconds"),
        }
        with self._begin() as conn:
            stored["id"] = conn.execute(annotations_table.insert().values(**stored)).inserted_primary_key[0]
        return stored

    def upsert_annotation(self, row: dict) -> dict:
        """Deprecated: `add_annotation`, which appends instead of replacing. Kept for callers that do not pass
        `dag_id` yet: it is taken from the change point (the DAG of the run the change happened in)."""
        import warnings

        warnings.warn("upsert_annotation is deprecated: use add_annotation", DeprecationWarning, stacklevel=2)
        if row.get("dag_id") is None:
            point = self.change_point({c: row[c] for c in CHANGE_KEY}) or {}
            row = {**row, "dag_id": point.get("dag_id") or ""}
        return self.add_annotation({**row, "author": row.get("author") or ""})

    def annotations(self, cluster: str | None = None) -> pd.DataFrame:
        """Each annotated change point's annotation: its newest word (what the series re-baselines from and
        the dashboard shows)."""
        t = annotations_table
        newest = sa.select(sa.func.max(t.c.id)).group_by(*(t.c[c] for c in CHANGE_KEY))
        query = sa.select(t).where(t.c.id.in_(newest))
        if cluster is not None:
            query = query.where(t.c.cluster == cluster)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(t.c.id), conn)

    def annotation_history(self, cluster: str | None = None) -> pd.DataFrame:
        """Every word ever said on change points, oldest first (who, when, under which DAG)."""
        t = annotations_table
        query = sa.select(t)
        if cluster is not None:
            query = query.where(t.c.cluster == cluster)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(t.c.id), conn)

    def dag_ids_of_series(self, cluster: str, workload: str, gpus: int, config_key: str) -> list[str]:
        """Every DAG whose stored runs hold this series ('' for `bench sweep` runs), sorted.

        A series' history, regression floor and change watch span the DAGs that run it (two suites on one
        cluster and config share it), so an annotation, which re-baselines the series, touches all of
        them: the web layer asks for edit permission on each of these DAGs before storing one."""
        t = results_table
        query = (
            sa.select(t.c.dag_id)
            .where(
                t.c.cluster == cluster,
                t.c.workload == workload,
                t.c.gpus == int(gpus),
                t.c.config_key == config_key,
            )
            .distinct()
        )
        with self._connect() as conn:
            return sorted(conn.execute(query).scalars())

    def suite_runs(self, dag_ids: Iterable[str] | None = None, ids: Iterable[str] | None = None) -> pd.DataFrame:
        """The suite runs, oldest first; only those of `dag_ids` ('' for `bench sweep`) and with one of `ids`
        as suite run id, when given (a page asks only for the runs it shows, never the whole table)."""
        query = sa.select(suite_runs_table)
        if dag_ids is not None:
            query = query.where(suite_runs_table.c.dag_id.in_(list(dag_ids)))
        if ids is not None:
            query = query.where(suite_runs_table.c.suite_run_id.in_(sorted(set(ids))))
        with self._connect() as conn:
            return pd.read_sql(query.order_by(suite_runs_table.c.started_at), conn)

    def dag_ids(self) -> list[str]:
        """Every DAG that stored a suite run ('' for `bench sweep`): what a page checks permissions on."""
        with self._connect() as conn:
            return sorted(conn.execute(sa.select(suite_runs_table.c.dag_id).distinct()).scalars())

    def _of_runs(self, dag_ids: Iterable[str]):
        """Results rows that belong to a stored suite run of one of `dag_ids`."""
        s = suite_runs_table
        return results_table.join(
            s, sa.and_(s.c.dag_id == results_table.c.dag_id, s.c.suite_run_id == results_table.c.suite_run_id)
        ), s.c.dag_id.in_(list(dag_ids))

    def series_options(self, dag_ids: Iterable[str]) -> pd.DataFrame:
        """The distinct (cluster, workload, config_key) of the runs of `dag_ids`: a page's filter choices."""
        t = results_table
        joined, allowed = self._of_runs(dag_ids)
        query = sa.select(t.c.cluster, t.c.workload, t.c.config_key).select_from(joined).where(allowed).distinct()
        with self._connect() as conn:
            return pd.read_sql(query, conn)

    def results_of(
        self,
        dag_ids: Iterable[str],
        columns: Iterable[str],
        newest: int | None = None,
        series: list[tuple] | None = None,
        **equal: str | int | None,
    ) -> pd.DataFrame:
        """`columns` of the results rows of `dag_ids`' runs, oldest first, where each given column (cluster,
        workload, gpus, config_key) equals its value: the filter runs in SQL, not over the whole table.
        `newest`: only the newest that many runs of each series (SQL's row_number), a page's bound;
        `series`: only these (cluster, workload, gpus, config_key) keys (an API page's)."""
        t = results_table
        joined, allowed = self._of_runs(dag_ids)
        equal = {name: value for name, value in equal.items() if value is not None and value != ""}
        where = [allowed, *(t.c[name] == value for name, value in equal.items())]
        if series is not None:
            where.append(sa.tuple_(*(t.c[k] for k in SERIES_KEY)).in_([tuple(k) for k in series]))
        columns = list(columns)
        if newest is None:
            query = sa.select(*(t.c[c] for c in columns)).select_from(joined).where(*where).order_by(t.c.started_at)
        elif self.engine.dialect.name == "postgresql":
            query = self._newest_lateral(list(dag_ids), columns, int(newest), equal, series)
        else:
            recency = (
                sa.func.row_number()
                .over(partition_by=[t.c[k] for k in SERIES_KEY], order_by=t.c.started_at.desc())
                .label("recency")
            )
            inner = sa.select(*(t.c[c] for c in columns), recency).select_from(joined).where(*where).subquery()
            query = (
                sa.select(*(inner.c[c] for c in columns))
                .where(inner.c.recency <= int(newest))
                .order_by(inner.c.started_at)
            )
        with self._connect() as conn:
            return pd.read_sql(query, conn)

    def _newest_lateral(self, dag_ids: list[str], columns: list[str], newest: int, equal: dict, series=None):
        """PostgreSQL: each series' newest rows by LATERAL ... ORDER BY started_at DESC LIMIT n, which walks
        the series index (revision 0018) instead of ranking every row of the table (0.25 s against 0.7 s
        for row_number() at 1,000 series x 156 runs)."""
        t, s = results_table, suite_runs_table
        chosen = [] if series is None else [sa.tuple_(*(t.c[k] for k in SERIES_KEY)).in_([tuple(k) for k in series])]
        keys = (
            sa.select(*(t.c[k] for k in SERIES_KEY))
            .where(t.c.dag_id.in_(dag_ids), *(t.c[n] == v for n, v in equal.items()), *chosen)
            .distinct()
            .subquery("series")
        )
        r = t.alias("r")
        newest_rows = (
            sa.select(*(r.c[c] for c in columns))
            .select_from(r.join(s, sa.and_(s.c.dag_id == r.c.dag_id, s.c.suite_run_id == r.c.suite_run_id)))
            .where(s.c.dag_id.in_(dag_ids), *(r.c[k] == keys.c[k] for k in SERIES_KEY))
            .order_by(r.c.started_at.desc())
            .limit(newest)
            .lateral("newest")
        )
        return (
            sa.select(*(newest_rows.c[c] for c in columns))
            .select_from(keys.join(newest_rows, sa.true()))
            .order_by(newest_rows.c.started_at)
        )

    def series_keys(
        self, dag_ids: Iterable[str], limit: int, offset: int, **equal: str | None
    ) -> tuple[list[tuple], int]:
        """One page of the (cluster, workload, gpus, config_key) series of `dag_ids`' runs in key order, and
        how many there are: paged in SQL (DISTINCT, ORDER BY, LIMIT/OFFSET; the count aggregated there)."""
        t = results_table
        joined, allowed = self._of_runs(dag_ids)
        where = [allowed, *(t.c[n] == v for n, v in equal.items() if v is not None and v != "")]
        distinct = sa.select(*(t.c[k] for k in SERIES_KEY)).select_from(joined).where(*where).distinct().subquery()
        page = sa.select(distinct).order_by(*distinct.c).limit(int(limit)).offset(int(offset))
        with self._connect() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(distinct)).scalar() or 0
            return [tuple(row) for row in conn.execute(page)], int(total)

    def series_points(
        self, dag_ids: Iterable[str], key: dict, columns: Iterable[str], limit: int, offset: int
    ) -> pd.DataFrame:
        """One series' rows of `dag_ids`' runs, newest first, one page of them (LIMIT/OFFSET in SQL)."""
        t = results_table
        joined, allowed = self._of_runs(dag_ids)
        query = (
            sa.select(*(t.c[c] for c in columns))
            .select_from(joined)
            .where(allowed, *(t.c[k] == key[k] for k in SERIES_KEY))
            .order_by(t.c.started_at.desc(), t.c.dag_id)
            .limit(int(limit))
            .offset(int(offset))
        )
        with self._connect() as conn:
            return pd.read_sql(query, conn)

    def run_results(self, dag_ids: Iterable[str], suite_run_id: str, columns: Iterable[str]) -> pd.DataFrame:
        """The results rows of one suite run (of each of `dag_ids` that has a run with that id)."""
        t = results_table
        joined, allowed = self._of_runs(dag_ids)
        query = (
            sa.select(*(t.c[c] for c in columns))
            .select_from(joined)
            .where(allowed, t.c.suite_run_id == suite_run_id)
            .order_by(t.c.dag_id, t.c.workload, t.c.gpus)
        )
        with self._connect() as conn:
            return pd.read_sql(query, conn)

    def recent_probes(self, dag_ids: Iterable[str], newest: int, cluster: str | None = None) -> pd.DataFrame:
        """The newest `newest` storage probes of each (cluster, paths, sample size) of `dag_ids`' runs,
        oldest first: the storage-ceiling lines of the overview. A probe is keyed by its suite run id alone
        (it names no DAG), so one whose id a run of any other DAG also holds is left out: it cannot be told
        whether it is a readable DAG's."""
        p, s = probes_table, suite_runs_table
        recency = (
            sa.func.row_number()
            .over(partition_by=[p.c.cluster, p.c.paths, p.c.sample_bytes], order_by=p.c.probed_at.desc())
            .label("recency")
        )
        columns = (
            "suite_run_id",
            "cluster",
            "probed_at",
            "paths",
            "sample_bytes",
            "ceiling_mb_s",
            "conclusive",
            "accepted",
        )
        joined = p.join(s, s.c.suite_run_id == p.c.suite_run_id)
        other = suite_runs_table.alias("other")
        foreign = sa.exists().where(other.c.suite_run_id == p.c.suite_run_id, other.c.dag_id.not_in(list(dag_ids)))
        where = [s.c.dag_id.in_(list(dag_ids)), p.c.cluster == cluster if cluster else sa.true(), ~foreign]
        inner = sa.select(*(p.c[c] for c in columns), recency).select_from(joined).where(*where).subquery()
        query = sa.select(*(inner.c[c] for c in columns)).where(inner.c.recency <= int(newest))
        with self._connect() as conn:
            return pd.read_sql(query.order_by(inner.c.probed_at), conn).drop_duplicates(["suite_run_id"])


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=30000")  # first: the WAL switch itself may wait for another opener
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def _sqlite_read_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


_STORED = {c.name for c in results_table.columns}


def _row(record: dict) -> dict:
    """A frame record as the store's row: stored columns only, NaN as NULL, and a figure its label
    marks as not measured (`WITHHELD`: a restore the page cache served) NULL, so it never enters history."""
    row = {}
    for key, value in record.items():
        if key not in _STORED:
            continue
        label = WITHHELD.get(key)
        if label is not None and record.get(label[0]) == label[1]:
            value = None
        if isinstance(value, float) and np.isnan(value):
            value = None
        elif isinstance(value, np.generic):
            value = value.item()
        elif isinstance(value, (list, dict)):
            value = json.dumps(value)
        if key in METRICS and value is not None:
            value = float(value)
        row[key] = value
    return row
