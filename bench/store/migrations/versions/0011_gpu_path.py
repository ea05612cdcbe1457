"""The GPU path's columns (frame schema 5): which data-parallel backend ran (`backend`), the autocast
precision (`precision`) and the GPU's busy share of the step from CUDA events (`gpu_busy_share`).

Rows stored before keep NULL: they ran Horovod in fp32 or with the fp16 autocast `--amp` of the time
(their config_key says which) and no GPU busy time was measured; no row is rewritten or guessed.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

COLUMNS = (
    ("backend", sa.Text),
    ("precision", sa.Text),
    ("gpu_busy_share", sa.Float),
)


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("results")}
    with op.batch_alter_table("results") as batch:
        for name, kind in COLUMNS:
            if name not in have:
                batch.add_column(sa.Column(name, kind))


def downgrade() -> None:
    from bench.store.migrations.guard import refuse_data_loss

    refuse_data_loss("0011", "results", [name for name, _ in COLUMNS])
    with op.batch_alter_table("results") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
