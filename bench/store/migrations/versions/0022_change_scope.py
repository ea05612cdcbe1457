"""Cluster-wide changes (issue 63): `change_alerts.scope` ("cluster" for a shared drop the pooled test
confirmed over the series of one cluster; NULL for a series' own change point, as every row stored
before), `moved_most` (the kind of figure that moved most: storage-bound, compute-bound, communication,
checkpoint) and `moved` / `unmoved` (JSON lists of the series that moved with it and those that did not).

A cluster change is one row keyed like a series' (cluster, workload "*", gpus 0, config_key "*", metric
"pooled", changed_at), so its deliveries are recorded as any change point's. Rows stored before keep
NULL: no row is rewritten or guessed. The downgrade drops the columns only while they are all NULL
(guard.drop_columns refuses to lose a stored value).

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

CHANGE_COLUMNS = (("scope", sa.Text), ("moved_most", sa.Text), ("moved", sa.Text), ("unmoved", sa.Text))


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("change_alerts", CHANGE_COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0022", "change_alerts", CHANGE_COLUMNS)
