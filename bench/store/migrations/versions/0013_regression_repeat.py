"""A suspected regression's second run: `repeat_img_s`, the images/s of a scale run once more after
it fell under its series' regression floor (the check takes the better of the two runs).

Rows stored before keep NULL: no second run was made then; no row is rewritten or guessed.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

COLUMNS = (("repeat_img_s", sa.Float),)


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0013", "results", COLUMNS)
