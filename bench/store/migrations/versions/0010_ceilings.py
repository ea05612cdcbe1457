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
from alembic import op

revision = "0010"
down_revision = "0007"  # re-chained after 0008 and 0009 when they land
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
    ("ideal", sa.Text),
    ("expected_bound_by", sa.Text),
    ("ceiling_note", sa.Text),
)


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("results")}
    with op.batch_alter_table("results") as batch:
        for name, kind in COLUMNS:
            if name not in have:
                batch.add_column(sa.Column(name, kind))


def downgrade() -> None:
    """Only where no stored row holds a ceiling: a downgrade never drops figures."""
    conn = op.get_bind()
    filled = " OR ".join(f"{name} IS NOT NULL" for name, _ in COLUMNS)
    if conn.exec_driver_sql(f"SELECT count(*) FROM results WHERE {filled}").scalar():
        raise RuntimeError("refusing to downgrade below 0010: stored rows hold ceilings it would drop")
    with op.batch_alter_table("results") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
