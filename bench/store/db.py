"""Results store: SQLAlchemy over SQLite (default) or PostgreSQL, idempotent per (suite run, workload, GPUs).

Schema changes are Alembic revisions (`bench/store/migrations/versions/`, version table
`scalewatch_alembic_version`); opening a store upgrades it in place, in one transaction, keeping every
row. A store made by the hand-numbered migrations that came before is adopted (stamped) first, and a
store newer than this code is refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from bench.analysis.differential import FIGURES as DIFFERENTIAL_FIGURES
from bench.analysis.differential import LABELS as DIFFERENTIAL_LABELS
from bench.analysis.frame import COLUMNS, KEY, METRICS
from bench.analysis.sizing import SIZING_COUNTS, SIZING_FLOATS
from bench.errors import ConfigError

metadata = sa.MetaData()

_TEXT = {
    "config_key",
    "suite_run_id",
    "workload",
    "state",
    "drop_caches",
    "launcher",
    "cluster",
    "started_at",
    "reason",
    "versions",
    "slots",
    "verdict",
    "inconclusive_reason",
    "slowest_host",
    "rank_breakdown",
    "bottleneck",
    "bottleneck_evidence",
    "bytes_source",
    "bandwidth_note",
    "backend",
    "precision",
}
_BOOL = {"valid", "cache_risk", "cache_served", "bandwidth_valid", "accepted", "oversubscribed", "borderline"}

results_table = sa.Table(
    "results",
    metadata,
    *(
        sa.Column(
            c,
            sa.Integer
            if c in ("gpus", "schema_version", "slowest_rank")
            else sa.Boolean
            if c in _BOOL
            else sa.Text
            if c in _TEXT
            else sa.Float,
            primary_key=c in KEY,
            nullable=c not in KEY,
        )
        for c in COLUMNS
    ),
    sa.Column("scaling_efficiency", sa.Float),
    sa.Column("scaling_efficiency_ci_low", sa.Float),
    sa.Column("scaling_efficiency_ci_high", sa.Float),
    sa.Column("bandwidth_efficiency", sa.Float),
    sa.Column("verdict", sa.Text),
    sa.Column("inconclusive_reason", sa.Text),
    sa.Column("borderline", sa.Boolean),
    sa.Column("passed", sa.Boolean),
    sa.Column("failed_expectations", sa.Text),
    sa.Column("accepted", sa.Boolean),
    sa.Column("bottleneck", sa.Text),
    sa.Column("bottleneck_evidence", sa.Text),
    *(sa.Column(c, sa.Float) for c in DIFFERENTIAL_FIGURES),
    *(sa.Column(c, sa.Text) for c in DIFFERENTIAL_LABELS),
    *(sa.Column(c, sa.Float) for c in SIZING_FLOATS),
    *(sa.Column(c, sa.Integer) for c in SIZING_COUNTS),
)

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
    sa.Column("suite_run_id", sa.Text, primary_key=True),
    sa.Column("started_at", sa.Text),
    sa.Column("cluster", sa.Text),
    sa.Column("passed", sa.Boolean),
    sa.Column("report_path", sa.Text),
    sa.Column("config", sa.Text),
    sa.Column("dag_id", sa.Text),
)

change_alerts_table = sa.Table(
    "change_alerts",
    metadata,
    *(
        sa.Column(c, sa.Integer if c == "gpus" else sa.Text, primary_key=True)
        for c in ("cluster", "workload", "gpus", "config_key", "metric", "changed_at")
    ),
    *(sa.Column(c, sa.Text) for c in ("changed_in", "detected_at", "detected_in")),
    *(sa.Column(c, sa.Float) for c in ("before", "after", "change", "pvalue")),
    *(sa.Column(c, sa.Text) for c in ("state", "recovered_at", "recovered_in")),
    sa.Column("size", sa.Float),
)
CHANGE_KEY = ["cluster", "workload", "gpus", "config_key", "metric", "changed_at"]


MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "scalewatch_alembic_version"  # never Airflow's alembic_version, when both share a database
LEGACY_TABLE = "scalewatch_schema"  # the hand-numbered migrations before Alembic
SCHEMA_REVISION = "0008_gpu_path"
# The hand-numbered store's versions and the revision each one equals once brought up to version 3.
LEGACY_REVISION = {3: "0001", 4: "0002"}


class StoreSchemaError(ConfigError):
    """The store's schema is one this code cannot use (newer than it, or unknown)."""


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


def _adopt_legacy(conn: Connection, cfg) -> None:
    """A store made by the hand-numbered migrations: finish its steps up to 3, then stamp its revision."""
    from alembic import command

    tables = set(sa.inspect(conn).get_table_names())
    version = 1
    if LEGACY_TABLE in tables:
        version = int(conn.execute(sa.text(f"SELECT max(version) FROM {LEGACY_TABLE}")).scalar() or 1)
    if version < 2:  # the legacy steps this store had not applied yet, as they were
        conn.execute(
            sa.text("CREATE INDEX IF NOT EXISTS ix_results_history ON results (workload, gpus, cluster, started_at)")
        )
    if version < 3 and "config_key" not in {c["name"] for c in sa.inspect(conn).get_columns("results")}:
        conn.execute(sa.text("ALTER TABLE results ADD COLUMN config_key TEXT"))
    command.stamp(cfg, LEGACY_REVISION.get(version, "0001"))


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


class ResultsStore:
    """The store's location is passed where it is used (CLI flag, environment or Airflow connection),
    never carried in the run's config: a URL with a password must not reach XComs, logs or rows."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = sa.create_engine(check_url(url), future=True)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self.migrate()

    def migrate(self) -> str:
        """Bring the store to this code's Alembic head, keeping every row; refuse a newer store."""
        import logging

        from alembic import command
        from alembic.script import ScriptDirectory
        from alembic.util.exc import CommandError

        # Alembic narrates every open at INFO ("Context impl SQLiteImpl"): noise in a user's terminal.
        logging.getLogger("alembic").setLevel(logging.WARNING)
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":  # concurrent first opens: one migrates
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(724101)"))
            cfg = _alembic_config(conn)
            current = _current_revision(conn)
            if current is None and "results" in sa.inspect(conn).get_table_names():
                _adopt_legacy(conn, cfg)
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

    def schema_version(self) -> str | None:
        with self.engine.connect() as conn:
            return _current_revision(conn)

    def upsert(self, frame: pd.DataFrame, suite: dict | None = None) -> int:
        """Replace this suite run's rows: a rerun overwrites, never duplicates; one transaction."""
        rows = [_row(r) for r in frame.to_dict("records")]
        with self.engine.begin() as conn:
            ids = {r["suite_run_id"] for r in rows}
            if rows:  # one executemany statement: 52,000 history rows took 44 s row by row
                conn.execute(self._upsert(results_table, rows[0], list(KEY)), rows)
            if suite is not None:
                conn.execute(self._upsert(suite_runs_table, suite, ["suite_run_id"]), [suite])
            # rows of this suite run that the rerun no longer has (a scale removed) go too
            for sid in ids:
                keep = [(r["workload"], r["gpus"]) for r in rows if r["suite_run_id"] == sid]
                stale = sa.and_(
                    results_table.c.suite_run_id == sid,
                    sa.not_(sa.tuple_(results_table.c.workload, results_table.c.gpus).in_(keep)),
                )
                conn.execute(results_table.delete().where(stale))
        return len(rows)

    def _upsert(self, table: sa.Table, row: dict, key: list[str]):
        """INSERT .. ON CONFLICT (key) DO UPDATE over `row`'s columns; values are bound at execute."""
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = insert(table)
        return stmt.on_conflict_do_update(index_elements=key, set_={k: stmt.excluded[k] for k in row if k not in key})

    def frame(self, where=None) -> pd.DataFrame:
        query = sa.select(results_table)
        if where is not None:
            query = query.where(where)
        with self.engine.connect() as conn:
            return pd.read_sql(query.order_by(results_table.c.started_at), conn)

    def history_values(self, frame: pd.DataFrame, runs: int, exclude_suite: str) -> list[list[float]]:
        """Throughput of the last `runs` accepted runs of each row's series (workload, GPUs, cluster, config)."""
        t = results_table
        out: list[list[float]] = []
        with self.engine.connect() as conn:
            for _, row in frame.iterrows():
                q = (
                    sa.select(t.c.throughput_img_s)
                    .where(
                        t.c.workload == row["workload"],
                        t.c.gpus == int(row["gpus"]),
                        t.c.cluster == row["cluster"],
                        t.c.config_key == row["config_key"],
                        t.c.accepted.is_(True),
                        t.c.suite_run_id != exclude_suite,
                        t.c.throughput_img_s.is_not(None),
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
        with self.engine.begin() as conn:
            conn.execute(self._upsert(probes_table, row, ["suite_run_id"]), [row])

    def probes(self, cluster: str | None = None) -> pd.DataFrame:
        query = sa.select(probes_table)
        if cluster is not None:
            query = query.where(probes_table.c.cluster == cluster)
        with self.engine.connect() as conn:
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
        with self.engine.connect() as conn:
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
        with self.engine.connect() as conn:
            return pd.read_sql(q, conn)

    def change_alerts(self, cluster: str | None = None) -> pd.DataFrame:
        query = sa.select(change_alerts_table)
        if cluster is not None:
            query = query.where(change_alerts_table.c.cluster == cluster)
        with self.engine.connect() as conn:
            return pd.read_sql(query.order_by(change_alerts_table.c.changed_at), conn)

    def upsert_change(self, row: dict) -> None:
        """One row per series change point: finding it again next week updates it, never adds one."""
        with self.engine.begin() as conn:
            conn.execute(self._upsert(change_alerts_table, row, CHANGE_KEY), [row])

    def suite_runs(self) -> pd.DataFrame:
        with self.engine.connect() as conn:
            return pd.read_sql(sa.select(suite_runs_table).order_by(suite_runs_table.c.started_at), conn)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


_STORED = {c.name for c in results_table.columns}


def _row(record: dict) -> dict:
    row = {}
    for key, value in record.items():
        if key not in _STORED:
            continue
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
