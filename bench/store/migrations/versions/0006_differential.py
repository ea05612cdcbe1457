"""Differential confirmation of a failing scale's cause: each rerun variant's scaling efficiency,
DS-Analyzer's fetch and prep stalls, which rerun removed the drop, and whether the rule's cause was
confirmed or corrected (bench.analysis.verdict.differential).

Rows stored before keep NULL in the new columns (no scale was rerun); no row is rewritten.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bench.store.migrations.guard import refuse_data_loss

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = (
    ("warm_efficiency", sa.Float),
    ("synthetic_efficiency", sa.Float),
    ("fetch_stall", sa.Float),
    ("prep_stall", sa.Float),
    ("rerun_removed", sa.Text),
    ("cause_check", sa.Text),
)


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("results")}
    with op.batch_alter_table("results") as batch:
        for name, kind in COLUMNS:
            if name not in have:
                batch.add_column(sa.Column(name, kind))


def downgrade() -> None:
    refuse_data_loss(revision, "results", [name for name, _ in COLUMNS])
    with op.batch_alter_table("results") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
