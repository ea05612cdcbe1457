"""Workload files and emulated accelerators (issue 39): `emulated`, true where the scale's ranks waited an
accelerator profile's time per batch instead of training (bench.workloads.emulate), and `accelerator`,
that profile's name ('' where the model trained for real). `au` itself is older (revision 0003).

Rows stored before keep NULL in both: every one of them trained for real, and readers take NULL as
not emulated; no row is rewritten.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COLUMNS = (("emulated", sa.Boolean), ("accelerator", sa.Text))


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0016", "results", COLUMNS)
