"""Measurement rules (frame schema 2): intervals, window, spread, slots, verdicts; the run's DAG.

Rows stored before keep NULL in the new columns: they were stored before the suite could say whether
they were conclusive. Results URLs that older versions stored inside `suite_runs.config` lose their
password here.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from bench.store.migrations.guard import refuse_data_loss

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = (
    ("throughput_ci_low", sa.Float),
    ("throughput_ci_high", sa.Float),
    ("measured_s", sa.Float),
    ("min_measure_s", sa.Float),
    ("step_time_spread", sa.Float),
    ("oversubscribed", sa.Boolean),
    ("slots", sa.Text),
    ("scaling_efficiency_ci_low", sa.Float),
    ("scaling_efficiency_ci_high", sa.Float),
    ("verdict", sa.Text),
    ("inconclusive_reason", sa.Text),
    ("borderline", sa.Boolean),
)


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("results")}
    with op.batch_alter_table("results") as batch:
        for name, kind in COLUMNS:
            if name not in have:  # a store opened by a pre-release of this version may have some
                batch.add_column(sa.Column(name, kind))
    with op.batch_alter_table("suite_runs") as batch:
        batch.add_column(sa.Column("dag_id", sa.Text))
    _scrub_stored_urls()


def _scrub_stored_urls() -> None:
    bind = op.get_bind()
    runs = sa.table("suite_runs", sa.column("suite_run_id", sa.Text), sa.column("config", sa.Text))
    for run_id, config in bind.execute(sa.select(runs.c.suite_run_id, runs.c.config)).all():
        try:
            doc = json.loads(config or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and "results_url" in doc:
            doc.pop("results_url")
            bind.execute(runs.update().where(runs.c.suite_run_id == run_id).values(config=json.dumps(doc)))


def downgrade() -> None:
    refuse_data_loss(revision, "suite_runs", ["dag_id"])
    refuse_data_loss(revision, "results", [name for name, _ in COLUMNS])
    with op.batch_alter_table("suite_runs") as batch:
        batch.drop_column("dag_id")
    with op.batch_alter_table("results") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
