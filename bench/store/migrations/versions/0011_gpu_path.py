"""The GPU path's columns (frame schema 5): which data-parallel backend ran (`backend`), the autocast
precision (`precision`) and the GPU's busy share of the step from CUDA events (`gpu_busy_share`).

Rows stored before keep NULL: they ran Horovod in fp32 or with the fp16 autocast `--amp` of the time
(their config_key says which) and no GPU busy time was measured; no row is rewritten or guessed.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa

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
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0011", "results", COLUMNS)
