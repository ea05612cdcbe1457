"""A suite run's results rows (one per workload and scale, rerun-safe) and the accepted history of a series."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pandas as pd
import sqlalchemy as sa

from bench.results.schema import METRICS, WITHHELD
from bench.store.connection import StoreConnection
from bench.store.tables import (
    MANUAL,
    RESULTS_KEY,
    SUITE_RUNS_KEY,
    results_table,
    suite_runs_table,
)

STORED = {c.name for c in results_table.columns}


def stored_row(record: dict) -> dict:
    """A frame record as the store's row: stored columns only, NaN as NULL, and a figure its label
    marks as not measured (`WITHHELD`: a restore the page cache served) NULL, so it never enters history."""
    row = {}
    for key, value in record.items():
        if key not in STORED:
            continue
        label = WITHHELD.get(key)
        if label is not None and record.get(label[0]) == label[1]:
            value = None
        if isinstance(value, float) and np.isnan(value):
            value = None
        elif isinstance(value, np.generic):
            value = value.item()
        elif isinstance(value, (list, dict)):
            value = json.dumps(value)
        if key in METRICS and value is not None:
            value = float(value)
        row[key] = value
    return row


class ResultRecords(StoreConnection):
    def upsert(self, frame: pd.DataFrame, suite: dict | None = None) -> int:
        """Replace this suite run's rows: a rerun overwrites, never duplicates; one transaction.

        The rows belong to `suite`'s DAG ('' without one: `bench sweep`): another DAG's run with the same
        run id is neither overwritten nor swept as stale."""
        dag_id = (suite or {}).get("dag_id") or ""
        run_type = (suite or {}).get("run_type") or MANUAL
        rows = [stored_row(r) | {"dag_id": dag_id, "run_type": run_type} for r in frame.to_dict("records")]
        with self._begin() as conn:
            ids = {r["suite_run_id"] for r in rows}
            if rows:  # one executemany statement: 52,000 history rows took 44 s row by row
                conn.execute(self._upsert(results_table, rows[0], RESULTS_KEY), rows)
            if suite is not None:
                suite = {k: v for k, v in suite.items() if k != "run_type"} | {"dag_id": dag_id}
                conn.execute(self._upsert(suite_runs_table, suite, SUITE_RUNS_KEY), [suite])
            # rows of this suite run that the rerun no longer has (a scale removed) go too
            for sid in ids:
                keep = [(r["workload"], r["gpus"]) for r in rows if r["suite_run_id"] == sid]
                stale = sa.and_(
                    results_table.c.dag_id == dag_id,
                    results_table.c.suite_run_id == sid,
                    sa.not_(sa.tuple_(results_table.c.workload, results_table.c.gpus).in_(keep)),
                )
                conn.execute(results_table.delete().where(stale))
        return len(rows)

    def frame(self, where=None) -> pd.DataFrame:
        query = sa.select(results_table)
        if where is not None:
            query = query.where(where)
        with self._connect() as conn:
            return pd.read_sql(query.order_by(results_table.c.started_at), conn)

    def history_values(
        self,
        frame: pd.DataFrame,
        runs: int,
        exclude_suite: str,
        since: list[str | None] | None = None,
        column: str = "throughput_img_s",
        dag_ids: Iterable[str] | None = None,
        until: list[str | None] | None = None,
    ) -> list[list[float]]:
        """`column` (throughput by default; a checkpoint MB/s) of the last `runs` accepted runs of each row's
        series (workload, GPUs, cluster, config) that have it, from `since[i]` on where a row's series was
        re-baselined by an annotated change. `dag_ids`: only rows of these DAGs (a page's readable ones:
        nothing it derives may come from a DAG its user cannot read); None: every DAG that runs the series
        (the weekly check's own history). `until[i]`: only runs started at or before it (a comparison's
        later run: the history as it stood then, not runs stored since)."""
        t = results_table
        figure = t.c[column]
        of_dags = t.c.dag_id.in_(list(dag_ids)) if dag_ids is not None else sa.true()
        out: list[list[float]] = []
        with self._connect() as conn:
            for i, (_, row) in enumerate(frame.iterrows()):
                start = since[i] if since is not None else None
                end = until[i] if until is not None else None
                q = (
                    sa.select(figure)
                    .where(
                        t.c.workload == row["workload"],
                        t.c.gpus == int(row["gpus"]),
                        t.c.cluster == row["cluster"],
                        t.c.config_key == row["config_key"],
                        t.c.accepted.is_(True),
                        t.c.suite_run_id != exclude_suite,
                        figure.is_not(None),
                        t.c.started_at >= start if start is not None else sa.true(),
                        t.c.started_at <= end if end is not None else sa.true(),
                        of_dags,
                    )
                    .order_by(t.c.started_at.desc())
                    .limit(runs)
                )
                out.append([float(v) for v in conn.execute(q).scalars()])
        return out

    def history_median(self, frame: pd.DataFrame, runs: int, exclude_suite: str) -> pd.Series:
        """Median throughput of the last `runs` accepted runs per row's series, aligned to frame."""
        values = self.history_values(frame, runs, exclude_suite)
        return pd.Series([float(np.median(v)) if v else np.nan for v in values], index=frame.index, dtype=float)

    def accepted_series(self, cluster: str, workload: str, gpus: int, config_key: str) -> pd.DataFrame:
        """Every accepted run of one series, oldest first: the history its change points are found in."""
        t = results_table
        q = (
            sa.select(t)
            .where(
                t.c.cluster == cluster,
                t.c.workload == workload,
                t.c.gpus == int(gpus),
                t.c.config_key == config_key,
                t.c.accepted.is_(True),
            )
            .order_by(t.c.started_at)
        )
        with self._connect() as conn:
            return pd.read_sql(q, conn)
