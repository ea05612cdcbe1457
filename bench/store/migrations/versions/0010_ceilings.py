"""Expected scaling from measured ceilings (bench.analysis.verdict.ceilings): each scale's node ceiling
(`independent_img_s`, its ranks as independent copies on the same slots), its gradient allreduce
(`allreduce_s`), the efficiency against linear and against the ceiling, the ideal the verdict used,
and the expected throughput with the component that binds it.

Rows stored before keep NULL in the new columns (their scaling_efficiency was against linear, as
`ideal` NULL means); no row is rewritten.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COLUMNS = (
    ("independent_img_s", sa.Float),
    ("linear_efficiency", sa.Float),
    ("independent_efficiency", sa.Float),
    ("expected_img_s", sa.Float),
    ("expected_efficiency", sa.Float),
    ("efficiency_vs_expected", sa.Float),
    ("allreduce_s", sa.Float),
    ("foreign_cpu_share", sa.Float),
    ("ideal", sa.Text),
    ("expected_bound_by", sa.Text),
    ("ceiling_note", sa.Text),
    ("foreign_top", sa.Text),
)


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0010", "results", COLUMNS)
