"""The storage probes: one per suite run, their history per cluster and files, and the overview's recent ones."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd
import sqlalchemy as sa

from bench.store.connection import StoreConnection
from bench.store.tables import (
    probes_table,
    suite_runs_table,
)


class ProbeRecords(StoreConnection):
    def upsert_probe(self, row: dict) -> None:
        """One probe per suite run: a rerun replaces it, never adds a second."""
        row = {**row, "levels": json.dumps(row["levels"]), "paths": json.dumps(row["paths"])}
        with self._begin() as conn:
            conn.execute(self._upsert(probes_table, row, ["suite_run_id"]), [row])

    def probes(self, cluster: str | None = None) -> pd.DataFrame:
        query = sa.select(probes_table)
        if cluster is not None:
            query = query.where(probes_table.c.cluster == cluster)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(probes_table.c.probed_at), conn)

    def probe_history(
        self, cluster: str, paths: list[str], sample_bytes: float, runs: int, exclude_suite: str
    ) -> list[float]:
        """Ceilings of the last `runs` accepted probes of the same files on this cluster: same paths and
        the same sampled bytes (a dataset re-staged at another size under one path is another workload
        for fio: 48 small files and 1,536 of them differed by 35% on one disk)."""
        t = probes_table
        q = (
            sa.select(t.c.ceiling_mb_s)
            .where(
                t.c.cluster == cluster,
                t.c.paths == json.dumps(paths),
                t.c.sample_bytes == float(sample_bytes),
                t.c.accepted.is_(True),
                t.c.suite_run_id != exclude_suite,
            )
            .order_by(t.c.probed_at.desc())
            .limit(runs)
        )
        with self._connect() as conn:
            return [float(v) for v in conn.execute(q).scalars() if v is not None]

    def recent_probes(self, dag_ids: Iterable[str], newest: int, cluster: str | None = None) -> pd.DataFrame:
        """The newest `newest` storage probes of each (cluster, paths, sample size) of `dag_ids`' runs,
        oldest first: the storage-ceiling lines of the overview. A probe is keyed by its suite run id alone
        (it names no DAG), so one whose id a run of any other DAG also holds is left out: it cannot be told
        whether it is a readable DAG's."""
        p, s = probes_table, suite_runs_table
        recency = (
            sa.func.row_number()
            .over(partition_by=[p.c.cluster, p.c.paths, p.c.sample_bytes], order_by=p.c.probed_at.desc())
            .label("recency")
        )
        columns = (
            "suite_run_id",
            "cluster",
            "probed_at",
            "paths",
            "sample_bytes",
            "ceiling_mb_s",
            "conclusive",
            "accepted",
        )
        joined = p.join(s, s.c.suite_run_id == p.c.suite_run_id)
        other = suite_runs_table.alias("other")
        foreign = sa.exists().where(other.c.suite_run_id == p.c.suite_run_id, other.c.dag_id.not_in(list(dag_ids)))
        where = [s.c.dag_id.in_(list(dag_ids)), p.c.cluster == cluster if cluster else sa.true(), ~foreign]
        inner = sa.select(*(p.c[c] for c in columns), recency).select_from(joined).where(*where).subquery()
        query = sa.select(*(inner.c[c] for c in columns)).where(inner.c.recency <= int(newest))
        with self._connect() as conn:
            return pd.read_sql(query.order_by(inner.c.probed_at), conn).drop_duplicates(["suite_run_id"])
