"""What changed and what people said: each suite run's environment fingerprint (`run_environment`) and
annotations on change points (`annotations`).

`run_environment` holds one row per (dag_id, suite_run_id, field): driver, CUDA, NCCL, the libraries,
kernel, OS image, Slurm, nodes, NIC speeds, the dataset's mount and VBIOS (bench.env.fingerprint);
"unknown" where a field could not be read. `annotations` holds one row per change point (the
change_alerts key) a person marked expected or explained, with the note, who and when; the series
re-baselines from it. New tables only: no existing row is touched.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    tables = set(sa.inspect(op.get_bind()).get_table_names())
    if "run_environment" not in tables:
        op.create_table(
            "run_environment",
            sa.Column("dag_id", sa.Text, primary_key=True, server_default=""),
            sa.Column("suite_run_id", sa.Text, primary_key=True),
            sa.Column("field", sa.Text, primary_key=True),
            sa.Column("value", sa.Text),
        )
    if "annotations" not in tables:
        op.create_table(
            "annotations",
            sa.Column("cluster", sa.Text, primary_key=True),
            sa.Column("workload", sa.Text, primary_key=True),
            sa.Column("gpus", sa.Integer, primary_key=True),
            sa.Column("config_key", sa.Text, primary_key=True),
            sa.Column("metric", sa.Text, primary_key=True),
            sa.Column("changed_at", sa.Text, primary_key=True),
            sa.Column("kind", sa.Text, nullable=False),
            sa.Column("note", sa.Text, nullable=False),
            sa.Column("author", sa.Text),
            sa.Column("created_at", sa.Text),
        )


def downgrade() -> None:
    from bench.store.migrations.guard import refuse_data_loss

    for table in ("annotations", "run_environment"):
        refuse_data_loss("0009", table)
    for table in ("annotations", "run_environment"):
        if table in sa.inspect(op.get_bind()).get_table_names():
            op.drop_table(table)
