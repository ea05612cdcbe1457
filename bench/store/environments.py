"""Each suite run's environment fingerprint, field by field."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from bench.store.connection import StoreConnection
from bench.store.tables import (
    ENVIRONMENT_KEY,
    run_environment_table,
)


class EnvironmentRecords(StoreConnection):
    def upsert_environment(self, dag_id: str | None, suite_run_id: str, fingerprint: dict[str, str]) -> None:
        """A suite run's fingerprint, field by field; a rerun of the run replaces it."""
        rows = [
            {"dag_id": dag_id or "", "suite_run_id": suite_run_id, "field": k, "value": str(v)}
            for k, v in fingerprint.items()
        ]
        if rows:
            with self._begin() as conn:
                conn.execute(self._upsert(run_environment_table, rows[0], ENVIRONMENT_KEY), rows)

    def environments(
        self, suite_run_ids: Iterable[str] | None = None, dag_ids: Iterable[str] | None = None
    ) -> dict[str, dict[str, str]]:
        """suite_run_id -> {field: value} (of the runs asked for, or all). `dag_ids`: only the fingerprints
        stored by runs of these DAGs ('' for `bench sweep`): two DAGs may hold runs of one suite run id (an
        Airflow run id such as scheduled__<date> is one per DAG), and a page shows only its readable DAGs'."""
        t = run_environment_table
        query = sa.select(t.c.suite_run_id, t.c.field, t.c.value)
        if suite_run_ids is not None:
            query = query.where(t.c.suite_run_id.in_(list(suite_run_ids)))
        if dag_ids is not None:
            query = query.where(t.c.dag_id.in_(list(dag_ids)))
        out: dict[str, dict[str, str]] = {}
        with self._connect() as conn:
            for sid, field, value in conn.execute(query):
                out.setdefault(sid, {})[field] = value
        return out
