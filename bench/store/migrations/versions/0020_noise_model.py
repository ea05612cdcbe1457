"""The per-series noise model (issue 54): `noise_cv`, the series' relative week-to-week spread the
regression check used (NULL: fewer accepted runs than the noise model needs, judged on the fixed
tolerance alone), and `drop_ci_low` / `drop_ci_high`, the 95% interval of a regressed row's drop under
its series' level (relative, positive: lower).

`change_alerts` gains the same interval for a drop the noise model confirmed and `confirmed_runs`, the
runs at the new level that confirmed it: an alert says how sure it is.

Rows stored before keep NULL in all of them: they were judged on the fixed tolerance (or found by
E-Divisive alone); no row is rewritten or guessed.

Revision ID: 0020
Revises: 0018 (re-chained after 0019 at merge)
"""

from __future__ import annotations

import sqlalchemy as sa

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

COLUMNS = (("noise_cv", sa.Float), ("drop_ci_low", sa.Float), ("drop_ci_high", sa.Float))
CHANGE_COLUMNS = (("drop_ci_low", sa.Float), ("drop_ci_high", sa.Float), ("confirmed_runs", sa.Integer))


def upgrade() -> None:
    from bench.store.migrations.guard import add_columns

    add_columns("results", COLUMNS)
    add_columns("change_alerts", CHANGE_COLUMNS)


def downgrade() -> None:
    from bench.store.migrations.guard import drop_columns

    drop_columns("0020", "change_alerts", CHANGE_COLUMNS)
    drop_columns("0020", "results", COLUMNS)
