"""How each results row's suite run came about (issue 50): `results.run_type`, Airflow's run type
("scheduled" for the scheduler's own runs, "manual" for a triggered run or `bench sweep`).

Rows stored before get it from their run id where Airflow's id says it (`scheduled__...`, `manual__...`,
alone or after the suite run's `<dag_id>.` prefix); every other row stays NULL (unknown), never guessed.
No row is added, moved or dropped. Run again over a store that has the column, it changes nothing; the
downgrade drops the column only.

Revision ID: 0021
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# Airflow's run-id prefixes of the two run types a suite's history holds.
PREFIXES = ("scheduled", "manual")


def upgrade() -> None:
    bind = op.get_bind()
    if "run_type" in {c["name"] for c in sa.inspect(bind).get_columns("results")}:
        return
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("run_type", sa.Text, nullable=True))
    for run_type in PREFIXES:
        bind.execute(
            sa.text(
                "UPDATE results SET run_type = :run_type WHERE run_type IS NULL "
                "AND (suite_run_id LIKE :bare ESCAPE '\\' OR suite_run_id LIKE :prefixed ESCAPE '\\')"
            ),
            {"run_type": run_type, "bare": f"{run_type}\\_\\_%", "prefixed": f"%.{run_type}\\_\\_%"},
        )


def downgrade() -> None:
    if "run_type" in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("results")}:
        with op.batch_alter_table("results") as batch:
            batch.drop_column("run_type")
