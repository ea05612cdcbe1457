"""Change points the weekly runs confirmed in each series' history, and which of them were alerted.

A change point is alerted once: the next run finds it again and must know it was sent. One that was
already old when first seen (a store that predates this table) is recorded, not alerted. A regression
whose series came back is marked recovered, once. Existing rows are untouched.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bench.store.migrations.guard import refuse_data_loss

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "change_alerts" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "change_alerts",
        sa.Column("cluster", sa.Text, primary_key=True),
        sa.Column("workload", sa.Text, primary_key=True),
        sa.Column("gpus", sa.Integer, primary_key=True),
        sa.Column("config_key", sa.Text, primary_key=True),
        sa.Column("metric", sa.Text, primary_key=True),
        sa.Column("changed_at", sa.Text, primary_key=True),
        sa.Column("changed_in", sa.Text),
        sa.Column("detected_at", sa.Text),
        sa.Column("detected_in", sa.Text),
        sa.Column("before", sa.Float),
        sa.Column("after", sa.Float),
        sa.Column("change", sa.Float),
        sa.Column("pvalue", sa.Float),
        sa.Column("state", sa.Text),
        sa.Column("recovered_at", sa.Text),
        sa.Column("recovered_in", sa.Text),
    )


def downgrade() -> None:
    refuse_data_loss(revision, "change_alerts")
    op.drop_table("change_alerts")
