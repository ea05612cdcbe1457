"""Change notices kept per alert target (`change_deliveries`), and annotations kept as a log.

A change point used to be stored as `alerted` before any delivery: with Slack down the notice was lost
and a retry found it "alerted". New change points are stored `pending`; each target that gets a
change point's notice ("change", or a regression's "recovered" note) gets a `change_deliveries` row,
and a retry sends only to the targets still missing it. Change points stored before keep their state,
and count as delivered to every target (target '*'): an `alerted` one its change notice, a `recovered`
one its change notice and its recovery note; none is sent again.

`annotations` was one row per change point, overwritten by the next word: it becomes append-only, with
an `id` (the order the words were said), `author`, `created_at` and `dag_id`; the newest word is the
change point's annotation. Every existing annotation is kept; its `dag_id` is the DAG of the run the
change happened in ('' where none is known).

The downgrade is refused while a change point holds more than one annotation, or a delivery to a
named target is recorded (revision 0013 can keep neither); otherwise it gives every row back.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

KEY = ("cluster", "workload", "gpus", "config_key", "metric", "changed_at")
ALL_TARGETS = "*"
_COLUMNS = ", ".join(KEY)


def _key_columns(primary_key: bool) -> list[sa.Column]:
    return [sa.Column(c, sa.Integer if c == "gpus" else sa.Text, primary_key=primary_key, nullable=False) for c in KEY]


def _deliveries() -> None:
    """The per-target table, with the change points alerted so far marked as reached everywhere."""
    bind = op.get_bind()
    if "change_deliveries" in sa.inspect(bind).get_table_names():
        return
    op.create_table(
        "change_deliveries",
        *_key_columns(primary_key=True),
        sa.Column("notice", sa.Text, primary_key=True),
        sa.Column("target", sa.Text, primary_key=True),
        sa.Column("sent_at", sa.Text),
        sa.Column("sent_in", sa.Text),
    )
    for notice, states, at, run in (
        ("change", "('alerted', 'recovered')", "detected_at", "detected_in"),
        ("recovered", "('recovered')", "recovered_at", "recovered_in"),
    ):
        bind.execute(
            sa.text(
                f"INSERT INTO change_deliveries ({_COLUMNS}, notice, target, sent_at, sent_in) "
                f"SELECT {_COLUMNS}, :notice, :target, {at}, {run} FROM change_alerts WHERE state IN {states}"
            ),
            {"notice": notice, "target": ALL_TARGETS},
        )


def _annotation_log() -> None:
    """annotations -> an append-only log; every row kept, with the DAG of its change point's run."""
    bind = op.get_bind()
    if "id" in {c["name"] for c in sa.inspect(bind).get_columns("annotations")}:
        return
    op.rename_table("annotations", "annotations_0013")
    op.create_table(
        "annotations",
        sa.Column("id", sa.Integer, autoincrement=True),
        *_key_columns(primary_key=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("author", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Text),
        sa.Column("dag_id", sa.Text, nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("id", name="annotation_log_pkey"),
    )
    op.create_index("ix_annotations_change", "annotations", list(KEY))
    # the DAG of the run the change happened in, as the web layer has checked it (one of them if several)
    dag_of_change = (
        "SELECT min(s.dag_id) FROM change_alerts c JOIN suite_runs s ON s.suite_run_id = c.changed_in WHERE "
        + " AND ".join(f"c.{k} = a.{k}" for k in KEY)
    )
    a_key = ", ".join(f"a.{k}" for k in KEY)
    bind.execute(
        sa.text(
            f"INSERT INTO annotations ({_COLUMNS}, kind, note, author, created_at, dag_id) "
            f"SELECT {a_key}, a.kind, a.note, COALESCE(a.author, ''), a.created_at, "
            f"COALESCE(({dag_of_change}), '') FROM annotations_0013 a ORDER BY a.created_at, {a_key}"
        )
    )
    op.drop_table("annotations_0013")


def upgrade() -> None:
    _deliveries()
    _annotation_log()


def _refuse(reason: str) -> None:
    from bench.store.errors import StoreDowngradeRefused

    raise StoreDowngradeRefused(
        f"refusing to downgrade the results store below revision {revision}: {reason}; back the store up and "
        "delete those rows first if you mean to lose them"
    )


def downgrade() -> None:
    bind = op.get_bind()
    points = f"SELECT count(*) FROM (SELECT DISTINCT {_COLUMNS} FROM annotations) d"
    said = bind.execute(sa.text(f"SELECT count(*) - ({points}) FROM annotations")).scalar()
    if said:
        _refuse(f"{said} annotation(s) were said after another on the same change point, and 0013 keeps one")
    named = bind.execute(
        sa.text("SELECT count(*) FROM change_deliveries WHERE target <> :all"), {"all": ALL_TARGETS}
    ).scalar()
    if named:
        _refuse(f"change_deliveries holds {named} delivery row(s) to named targets, which 0013 cannot keep")
    op.drop_table("change_deliveries")  # only the '*' rows, which 0013's states say again
    op.rename_table("annotations", "annotations_0014")
    op.create_table(
        "annotations",
        *_key_columns(primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("author", sa.Text),
        sa.Column("created_at", sa.Text),
    )
    # dag_id is dropped: the upgrade derives it again from the change point's run
    bind.execute(
        sa.text(
            f"INSERT INTO annotations ({_COLUMNS}, kind, note, author, created_at) "
            f"SELECT {_COLUMNS}, kind, note, author, created_at FROM annotations_0014"
        )
    )
    op.drop_table("annotations_0014")  # its index with it
