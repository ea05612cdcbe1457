"""Change points found in a series' history, and which alert target each one's notice reached."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd
import sqlalchemy as sa

from bench.results.schema import ALERTED, CHANGE_KEY, PENDING, SERIES_KEY
from bench.store.connection import StoreConnection
from bench.store.tables import (
    ALL_TARGETS,
    change_alerts_table,
    change_deliveries_table,
    results_of_runs,
    results_table,
    suite_runs_table,
)


class ChangeRecords(StoreConnection):
    def change_point(self, key: dict) -> dict | None:
        """The stored change point with this key (CHANGE_KEY fields), with the DAG of the run it happened in."""
        t = change_alerts_table
        query = sa.select(t, suite_runs_table.c.dag_id).outerjoin(
            suite_runs_table, suite_runs_table.c.suite_run_id == t.c.changed_in
        )
        for name in CHANGE_KEY:
            query = query.where(t.c[name] == key[name])
        with self._connect() as conn:
            row = conn.execute(query).mappings().first()
        return dict(row) if row is not None else None

    def change_alerts(self, cluster: str | None = None, dag_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """The stored change points (of `cluster`). `dag_ids`: only those a page whose user reads these DAGs
        may derive a status from: a change point is kept when a results row of one of their stored runs,
        on its series, started at its `changed_at` (a series spans the DAGs that run it, so one found in
        another DAG's runs alone is not shown); a cluster change (scope cluster) when its DAG (its
        config_key) is one of them."""
        c = change_alerts_table
        query = sa.select(c)
        if cluster is not None:
            query = query.where(c.c.cluster == cluster)
        if dag_ids is not None:
            dag_ids = list(dag_ids)
            t = results_table
            joined, allowed = results_of_runs(dag_ids)
            readable = (
                sa.select(sa.literal(1))
                .select_from(joined)
                .where(allowed, t.c.started_at == c.c.changed_at, *(t.c[k] == c.c[k] for k in SERIES_KEY))
            )
            # a cluster change (scope cluster, issue 63) is keyed by its DAG: readable with that DAG
            pooled = sa.and_(c.c.scope == "cluster", c.c.config_key.in_(dag_ids))
            query = query.where(sa.or_(readable.exists(), pooled))
        with self._connect() as conn:
            return pd.read_sql(query.order_by(change_alerts_table.c.changed_at), conn)

    def upsert_change(self, row: dict) -> None:
        """One row per series change point: finding it again next week updates it, never adds one. A NaN
        (a NULL column read back through pandas) is stored as NULL again: PostgreSQL refuses NaN in an
        integer column, SQLite would keep it as a float."""
        row = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        with self._begin() as conn:
            conn.execute(self._upsert(change_alerts_table, row, CHANGE_KEY), [row])

    def delivered(self, keys: Iterable[tuple]) -> dict[tuple, set[str]]:
        """(cluster, workload, gpus, config_key, metric, changed_at, notice) -> the targets that notice of that
        change point reached (ALL_TARGETS: every one), for the keys asked; a key nothing reached is absent."""
        wanted = {tuple(k) for k in keys}
        if not wanted:
            return {}
        t = change_deliveries_table
        columns = [*(t.c[c] for c in CHANGE_KEY), t.c.notice]
        query = sa.select(*columns, t.c.target).where(sa.tuple_(*columns).in_(sorted(wanted)))
        out: dict[tuple, set[str]] = {}
        with self._connect() as conn:
            for *key, target in conn.execute(query):
                out.setdefault(tuple(key), set()).add(target)
        return out

    def mark_delivered(self, notices: Iterable[dict], target: str, sent_in: str, targets: Iterable[str]) -> None:
        """`target` got these notices (change_alerts rows with their `kind`): kept per target, so that a retry
        of the alert task sends each only where it is still missing. A change point whose change notice has
        now reached every one of `targets` (the suite's alert targets) turns from pending to alerted. One
        transaction; marking twice changes nothing."""
        from datetime import UTC, datetime

        now = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [
            {c: n[c] for c in CHANGE_KEY} | {"notice": n["kind"], "target": target, "sent_at": now, "sent_in": sent_in}
            for n in notices
        ]
        if not rows:
            return
        t, everyone = change_deliveries_table, set(targets)
        with self._begin() as conn:
            conn.execute(self._insert(t).on_conflict_do_nothing(), rows)
            for row in rows:
                if row["notice"] != "change":
                    continue
                key = [t.c[c] == row[c] for c in CHANGE_KEY]
                got = set(conn.execute(sa.select(t.c.target).where(*key, t.c.notice == "change")).scalars())
                if ALL_TARGETS in got or everyone <= got:
                    a = change_alerts_table
                    conn.execute(
                        a.update()
                        .where(*(a.c[c] == row[c] for c in CHANGE_KEY), a.c.state == PENDING)
                        .values(state=ALERTED)
                    )
