"""The storage probe read from the compute nodes at once: `probe_nodes`, the nodes whose aggregate
read the sizing's `storage_ceiling_mb_s` is, and `storage_bound`, what binds it ('client': each node's
own read path, the aggregate still rising with nodes; 'store': the store, the aggregate stopped).

Rows stored before keep NULL: their ceiling was one client's fio on the worker, never a node count's;
no row is rewritten or guessed.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

COLUMNS = (("probe_nodes", sa.Integer), ("storage_bound", sa.Text))


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0017", "results", COLUMNS)
