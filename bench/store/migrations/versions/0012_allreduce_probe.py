"""The allreduce probe's figures beside `allreduce_s`: the gradient bytes it carried
(`allreduce_bytes`, what `bench project` scales), the bus bandwidth nccl-tests would report
(`allreduce_bus_gb_s`) and a one-element allreduce's latency (`allreduce_latency_s`).

Rows stored before keep NULL: no probe ran then; no row is rewritten or guessed.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = (
    ("allreduce_bytes", sa.Float),
    ("allreduce_bus_gb_s", sa.Float),
    ("allreduce_latency_s", sa.Float),
)


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0012", "results", COLUMNS)
