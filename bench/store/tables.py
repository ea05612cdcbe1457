"""The store's schema as SQLAlchemy tables: the results table is every stored column of
bench/results/schema.py, in its order; its revisions are Alembic's (bench/store/migrations)."""

from __future__ import annotations

import sqlalchemy as sa

from bench.results.schema import CHANGE_KEY, KEY, RESULT_COLUMNS, STORE_KEY, Column

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
    # a cluster change (issue 63, revision 0022): scope "cluster" (NULL: a series' own), the kind of figure
    # that moved most, and the series that moved and did not (JSON lists)
    *(sa.Column(c, sa.Text) for c in ("scope", "moved_most", "moved", "unmoved")),
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


def results_of_runs(dag_ids):
    """Results rows that belong to a stored suite run of one of `dag_ids`: (the join, the condition)."""
    s = suite_runs_table
    return results_table.join(
        s, sa.and_(s.c.dag_id == results_table.c.dag_id, s.c.suite_run_id == results_table.c.suite_run_id)
    ), s.c.dag_id.in_(list(dag_ids))
