"""The suite DAG is part of the key: results (dag_id, suite_run_id, workload, gpus), suite_runs
(dag_id, suite_run_id).

Airflow's run id holds no DAG id: two suite DAGs on one schedule both ran `scheduled__<date>`, and the
second one's upsert overwrote the first one's rows, whose stale-row delete then removed them. Each
results row gains the DAG of its suite run (from suite_runs, matched by suite_run_id; '' where none
is known, as for `bench sweep`); every row is kept, none duplicated. Upgrading a store already keyed
this way changes nothing. The downgrade is refused while two DAGs share a run id (it would merge them).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import warnings

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

RESULTS_KEY = ["dag_id", "suite_run_id", "workload", "gpus"]
RESULTS_OLD_KEY = ["suite_run_id", "workload", "gpus"]
SUITE_RUNS_KEY = ["dag_id", "suite_run_id"]


def _rekey(table: str, key: list[str]) -> None:
    """Replace the table's primary key (SQLite: batch mode copies the table; no row changes)."""
    bind = op.get_bind()
    old = sa.inspect(bind).get_pk_constraint(table)
    with warnings.catch_warnings():  # SQLite's copy names the old key columns before taking the new key
        warnings.filterwarnings("ignore", message=".*primary_key=True, not matching locally specified columns")
        with op.batch_alter_table(table) as batch:
            if bind.dialect.name != "sqlite" and old.get("name"):
                batch.drop_constraint(old["name"], type_="primary")
            batch.create_primary_key(f"{table}_pkey", key)


def upgrade() -> None:
    bind = op.get_bind()
    inspect = sa.inspect(bind)
    if inspect.get_pk_constraint("results")["constrained_columns"] != RESULTS_KEY:
        if "dag_id" not in {c["name"] for c in inspect.get_columns("results")}:
            with op.batch_alter_table("results") as batch:
                batch.add_column(sa.Column("dag_id", sa.Text, nullable=False, server_default=""))
        # suite_runs is still keyed by suite_run_id here: at most one DAG per run
        bind.execute(
            sa.text(
                "UPDATE results SET dag_id = COALESCE((SELECT s.dag_id FROM suite_runs s "
                "WHERE s.suite_run_id = results.suite_run_id), '') WHERE dag_id = ''"
            )
        )
        _rekey("results", RESULTS_KEY)
    if sa.inspect(bind).get_pk_constraint("suite_runs")["constrained_columns"] != SUITE_RUNS_KEY:
        bind.execute(sa.text("UPDATE suite_runs SET dag_id = '' WHERE dag_id IS NULL"))
        with op.batch_alter_table("suite_runs") as batch:
            batch.alter_column("dag_id", existing_type=sa.Text, nullable=False, server_default="")
        _rekey("suite_runs", SUITE_RUNS_KEY)


def _shared(table: str, key: list[str]) -> int:
    """How many rows the old key would merge away."""
    cols = ", ".join(key)
    return int(
        op.get_bind()
        .execute(
            sa.text(f"SELECT count(*) - (SELECT count(*) FROM (SELECT DISTINCT {cols} FROM {table}) d) FROM {table}")
        )
        .scalar()
    )


def downgrade() -> None:
    from bench.store.errors import StoreDowngradeRefused

    for table, key in (("results", RESULTS_OLD_KEY), ("suite_runs", ["suite_run_id"])):
        merged = _shared(table, key)
        if merged:
            raise StoreDowngradeRefused(
                f"refusing to downgrade the results store below revision {revision}: {merged} row(s) of {table} "
                f"share their ({', '.join(key)}) with another DAG's row, and the older key would merge them; back "
                "the store up and delete one DAG's rows first if you mean to lose them"
            )
    _rekey("results", RESULTS_OLD_KEY)
    with op.batch_alter_table("results") as batch:
        batch.drop_column("dag_id")
    _rekey("suite_runs", ["suite_run_id"])
    with op.batch_alter_table("suite_runs") as batch:
        batch.alter_column("dag_id", existing_type=sa.Text, nullable=True, server_default=None)
    op.get_bind().execute(sa.text("UPDATE suite_runs SET dag_id = NULL WHERE dag_id = ''"))
