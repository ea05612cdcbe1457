"""The step size of each change point where it happened (`size`, bench.analysis.history.detect.Step.size).

Segment means give a step inside a drift, or one before a later change that was missed, the wrong
size and even the wrong sign, and the weekly check matched a change found again by that sign: a
7% drop in a 9%-a-year climb was alerted a second time as a +0% "improvement". Rows stored before
keep NULL and are matched by the sign of `change` (bench.analysis.history.changes.step_size); no row is
rewritten.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bench.store.migrations.guard import refuse_data_loss

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "size" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("change_alerts")}:
        with op.batch_alter_table("change_alerts") as batch:
            batch.add_column(sa.Column("size", sa.Float))


def downgrade() -> None:
    refuse_data_loss(revision, "change_alerts", ["size"])
    with op.batch_alter_table("change_alerts") as batch:
        batch.drop_column("size")
