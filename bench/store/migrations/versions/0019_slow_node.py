"""One node against its peers (issue 49): `node_figures`, each node's figures of a scale (JSON: host,
ranks, read_mb_s, img_s, compute_img_s, comm_share, data_wait_share), and `slow_node`, the host that
stands out against the median of its peers ('' where none does; bench.analysis.verdict.nodes).

Rows stored before keep NULL: their per-node figures were never taken; no row is rewritten or guessed.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

COLUMNS = (("node_figures", sa.Text), ("slow_node", sa.Text))


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0019", "results", COLUMNS)
