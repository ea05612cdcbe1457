"""The store's failed tries the ranks retried (issue 64): `storage_errors`, the S3 GETs that failed and
were tried again during a scale (a store dropping connections; bench.loaders.s3_records). Above 0 the
scale is INCONCLUSIVE, naming the count.

Rows stored before keep NULL: file storage counts no such tries; no row is rewritten or guessed.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

COLUMNS = (("storage_errors", sa.Integer),)


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0023", "results", COLUMNS)
