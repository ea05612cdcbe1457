"""Downgrades never lose data silently: a table or column that still holds values is not dropped.

A downgrade that would drop them raises StoreDowngradeRefused naming what holds data; whoever means
to lose it backs the store up and empties those first. Empty tables and all-NULL columns go as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def refuse_data_loss(revision: str, table: str, columns: tuple[str, ...] | list[str] | None = None) -> None:
    """Raise unless dropping `table` (columns None) or its `columns` would drop no stored value."""
    from bench.store.errors import StoreDowngradeRefused

    bind = op.get_bind()
    if table not in sa.inspect(bind).get_table_names():
        return
    have = {c["name"] for c in sa.inspect(bind).get_columns(table)}
    t = sa.table(table, *(sa.column(c) for c in have))
    if columns is None:
        rows = bind.execute(sa.select(sa.func.count()).select_from(t)).scalar()
        if rows:
            raise StoreDowngradeRefused(
                f"refusing to downgrade the results store below revision {revision}: it would drop table "
                f"{table}, which holds {rows} row(s); back the store up and empty {table} first if you mean to "
                "lose them"
            )
        return
    held = {
        c: n
        for c in columns
        if c in have and (n := bind.execute(sa.select(sa.func.count(t.c[c])).select_from(t)).scalar())
    }
    if held:
        named = ", ".join(f"{table}.{c} ({n} value(s))" for c, n in held.items())
        raise StoreDowngradeRefused(
            f"refusing to downgrade the results store below revision {revision}: it would drop {named}; back "
            "the store up and clear those columns first if you mean to lose them"
        )


def add_columns(table: str, columns: tuple[tuple[str, object], ...]) -> None:
    """Add each (name, type) the table lacks: a rerun of the revision changes nothing, no row is touched."""
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}
    with op.batch_alter_table(table) as batch:
        for name, kind in columns:
            if name not in have:
                batch.add_column(sa.Column(name, kind))


def drop_columns(revision: str, table: str, columns: tuple[tuple[str, object], ...]) -> None:
    """The downgrade of `add_columns`: refused while any of them holds a value (refuse_data_loss)."""
    refuse_data_loss(revision, table, [name for name, _ in columns])
    with op.batch_alter_table(table) as batch:
        for name, _ in reversed(columns):
            batch.drop_column(name)
