"""People's words on change points: append-only, the newest is the change point's annotation."""

from __future__ import annotations

import pandas as pd
import sqlalchemy as sa

from bench.errors import ConfigError
from bench.results.schema import CHANGE_KEY
from bench.store.changes import ChangeRecords
from bench.store.tables import (
    ANNOTATION_FIELDS,
    annotations_table,
)


class AnnotationRecords(ChangeRecords):
    def add_annotation(self, row: dict) -> dict:
        """Append one person's word on a change point; earlier words stay (the newest is the change point's
        annotation: `annotations`; all of them: `annotation_history`). `row` holds the change point's key
        (CHANGE_KEY), `kind`, `note`, `author` and `dag_id` (the DAG under whose permission it was made, ''
        for a change of `bench sweep` runs), and may hold `created_at` (now, UTC, when absent). Returns the
        stored row with its `id`. ConfigError names a missing field; nothing is stored then."""
        from datetime import UTC, datetime

        missing = [f for f in ANNOTATION_FIELDS if row.get(f) is None]
        if missing:
            raise ConfigError(f"annotation: missing field(s) {', '.join(missing)}")
        stored = {f: row[f] for f in ANNOTATION_FIELDS} | {
            "gpus": int(row["gpus"]),
            "created_at": row.get("created_at") or datetime.now(UTC).isoformat(timespec="seconds"),
        }
        with self._begin() as conn:
            stored["id"] = conn.execute(annotations_table.insert().values(**stored)).inserted_primary_key[0]
        return stored

    def upsert_annotation(self, row: dict) -> dict:
        """Deprecated: `add_annotation`, which appends instead of replacing. Kept for callers that do not pass
        `dag_id` yet: it is taken from the change point (the DAG of the run the change happened in)."""
        import warnings

        warnings.warn("upsert_annotation is deprecated: use add_annotation", DeprecationWarning, stacklevel=2)
        if row.get("dag_id") is None:
            point = self.change_point({c: row[c] for c in CHANGE_KEY}) or {}
            row = {**row, "dag_id": point.get("dag_id") or ""}
        return self.add_annotation({**row, "author": row.get("author") or ""})

    def annotations(self, cluster: str | None = None) -> pd.DataFrame:
        """Each annotated change point's annotation: its newest word (what the series re-baselines from and
        the dashboard shows)."""
        t = annotations_table
        newest = sa.select(sa.func.max(t.c.id)).group_by(*(t.c[c] for c in CHANGE_KEY))
        query = sa.select(t).where(t.c.id.in_(newest))
        if cluster is not None:
            query = query.where(t.c.cluster == cluster)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(t.c.id), conn)

    def annotation_history(self, cluster: str | None = None) -> pd.DataFrame:
        """Every word ever said on change points, oldest first (who, when, under which DAG)."""
        t = annotations_table
        query = sa.select(t)
        if cluster is not None:
            query = query.where(t.c.cluster == cluster)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(t.c.id), conn)
