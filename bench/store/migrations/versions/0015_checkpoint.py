"""The checkpoint phase per scale (issue 40): `ckpt_write_mb_s`, `ckpt_read_mb_s` (aggregate MB/s, a
checkpoint lasting as long as its slowest rank), `ckpt_bytes` (bytes written) and `ckpt_stall_share`
(the share of measured step time that saves during training took), and `ckpt_write_checked`,
`ckpt_read_checked` (the better of the scale's run and its second run: the figures its regression floor
was held against, so the overview judges what the verdict judged).

Rows stored before keep NULL: no checkpoint was measured then; no row is rewritten or guessed.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

COLUMNS = (
    ("ckpt_write_mb_s", sa.Float),
    ("ckpt_read_mb_s", sa.Float),
    ("ckpt_bytes", sa.Float),
    ("ckpt_stall_share", sa.Float),
    ("ckpt_write_checked", sa.Float),
    ("ckpt_read_checked", sa.Float),
)


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0015", "results", COLUMNS)
