"""Indexes for the history overview and API (issue 41): each series' newest runs and one suite run's rows
are found by index, not by reading the table.

`ix_results_series` (cluster, workload, GPUs, config, started_at) serves the overview's newest runs per
series (row_number over that partition, newest first), one series' page of points and the series page;
`ix_results_run` and `ix_suite_runs_run` serve /api/runs and /api/compare, which look a suite run up by
its id across DAGs. Indexes only: no row is written, moved or dropped, both ways; run again over a
store that has them (a re-stamped store), it changes nothing.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_results_series", "results", ["cluster", "workload", "gpus", "config_key", "started_at"]),
    ("ix_results_run", "results", ["suite_run_id"]),
    ("ix_suite_runs_run", "suite_runs", ["suite_run_id"]),
)


def upgrade() -> None:
    import sqlalchemy as sa

    inspector = sa.inspect(op.get_bind())
    for name, table, columns in INDEXES:
        have = {c["name"] for c in inspector.get_columns(table)}
        if set(columns) <= have:  # a hand-made store lacking a column only goes without the index
            op.create_index(name, table, columns, if_not_exists=True)


def downgrade() -> None:
    for name, table, _columns in reversed(INDEXES):
        op.drop_index(name, table_name=table, if_exists=True)
