"""Dataset-only storage figures (frame schema 4): which counter the bytes came from, whether the
epoch-1 figure is labelled cache-served, and why a bandwidth figure is not a storage figure.

Rows stored before keep NULL in the new columns: their byte counter was /proc/<pid>/io (library
page-ins included) and nothing judged the storage's own cache; no row is rewritten or guessed.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bench.store.migrations.guard import refuse_data_loss

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

COLUMNS = (
    ("bytes_source", sa.Text),
    ("cache_served", sa.Boolean),
    ("bandwidth_note", sa.Text),
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
