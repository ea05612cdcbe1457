"""The pages' reads: suite runs, the series of the DAGs a user may read, paged in SQL."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import sqlalchemy as sa

from bench.results.schema import SERIES_KEY
from bench.store.connection import StoreConnection
from bench.store.tables import (
    results_of_runs,
    results_table,
    suite_runs_table,
)


class RunQueries(StoreConnection):
    def dag_ids_of_series(self, cluster: str, workload: str, gpus: int, config_key: str) -> list[str]:
        """Every DAG whose stored runs hold this series ('' for `bench sweep` runs), sorted.

        A series' history, regression floor and change watch span the DAGs that run it (two suites on one
        cluster and config share it), so an annotation, which re-baselines the series, touches all of
        them: the web layer asks for edit permission on each of these DAGs before storing one."""
        t = results_table
        query = (
            sa.select(t.c.dag_id)
            .where(
                t.c.cluster == cluster,
                t.c.workload == workload,
                t.c.gpus == int(gpus),
                t.c.config_key == config_key,
            )
            .distinct()
        )
        with self._connect() as conn:
            return sorted(conn.execute(query).scalars())

    def suite_runs(self, dag_ids: Iterable[str] | None = None, ids: Iterable[str] | None = None) -> pd.DataFrame:
        """The suite runs, oldest first; only those of `dag_ids` ('' for `bench sweep`) and with one of `ids`
        as suite run id, when given (a page asks only for the runs it shows, never the whole table)."""
        query = sa.select(suite_runs_table)
        if dag_ids is not None:
            query = query.where(suite_runs_table.c.dag_id.in_(list(dag_ids)))
        if ids is not None:
            query = query.where(suite_runs_table.c.suite_run_id.in_(sorted(set(ids))))
        with self._connect() as conn:
            return pd.read_sql(query.order_by(suite_runs_table.c.started_at), conn)

    def dag_ids(self) -> list[str]:
        """Every DAG that stored a suite run ('' for `bench sweep`): what a page checks permissions on."""
        with self._connect() as conn:
            return sorted(conn.execute(sa.select(suite_runs_table.c.dag_id).distinct()).scalars())

    def series_options(self, dag_ids: Iterable[str]) -> pd.DataFrame:
        """The distinct (cluster, workload, config_key) of the runs of `dag_ids`: a page's filter choices."""
        t = results_table
        joined, allowed = results_of_runs(dag_ids)
        query = sa.select(t.c.cluster, t.c.workload, t.c.config_key).select_from(joined).where(allowed).distinct()
        with self._connect() as conn:
            return pd.read_sql(query, conn)

    def results_of(
        self,
        dag_ids: Iterable[str],
        columns: Iterable[str],
        newest: int | None = None,
        series: list[tuple] | None = None,
        **equal: str | int | None,
    ) -> pd.DataFrame:
        """`columns` of the results rows of `dag_ids`' runs, oldest first, where each given column (cluster,
        workload, gpus, config_key) equals its value: the filter runs in SQL, not over the whole table.
        `newest`: only the newest that many runs of each series (SQL's row_number), a page's bound;
        `series`: only these (cluster, workload, gpus, config_key) keys (an API page's)."""
        t = results_table
        joined, allowed = results_of_runs(dag_ids)
        equal = {name: value for name, value in equal.items() if value is not None and value != ""}
        where = [allowed, *(t.c[name] == value for name, value in equal.items())]
        if series is not None:
            where.append(sa.tuple_(*(t.c[k] for k in SERIES_KEY)).in_([tuple(k) for k in series]))
        columns = list(columns)
        if newest is None:
            query = sa.select(*(t.c[c] for c in columns)).select_from(joined).where(*where).order_by(t.c.started_at)
        elif self.engine.dialect.name == "postgresql":
            query = self._newest_lateral(list(dag_ids), columns, int(newest), equal, series)
        else:
            recency = (
                sa.func.row_number()
                .over(partition_by=[t.c[k] for k in SERIES_KEY], order_by=t.c.started_at.desc())
                .label("recency")
            )
            inner = sa.select(*(t.c[c] for c in columns), recency).select_from(joined).where(*where).subquery()
            query = (
                sa.select(*(inner.c[c] for c in columns))
                .where(inner.c.recency <= int(newest))
                .order_by(inner.c.started_at)
            )
        with self._connect() as conn:
            return pd.read_sql(query, conn)

    def _newest_lateral(self, dag_ids: list[str], columns: list[str], newest: int, equal: dict, series=None):
        """PostgreSQL: each series' newest rows by LATERAL ... ORDER BY started_at DESC LIMIT n, which walks
        the series index (revision 0018) instead of ranking every row of the table (0.25 s against 0.7 s
        for row_number() at 1,000 series x 156 runs)."""
        t, s = results_table, suite_runs_table
        chosen = [] if series is None else [sa.tuple_(*(t.c[k] for k in SERIES_KEY)).in_([tuple(k) for k in series])]
        keys = (
            sa.select(*(t.c[k] for k in SERIES_KEY))
            .where(t.c.dag_id.in_(dag_ids), *(t.c[n] == v for n, v in equal.items()), *chosen)
            .distinct()
            .subquery("series")
        )
        r = t.alias("r")
        newest_rows = (
            sa.select(*(r.c[c] for c in columns))
            .select_from(r.join(s, sa.and_(s.c.dag_id == r.c.dag_id, s.c.suite_run_id == r.c.suite_run_id)))
            .where(s.c.dag_id.in_(dag_ids), *(r.c[k] == keys.c[k] for k in SERIES_KEY))
            .order_by(r.c.started_at.desc())
            .limit(newest)
            .lateral("newest")
        )
        return (
            sa.select(*(newest_rows.c[c] for c in columns))
            .select_from(keys.join(newest_rows, sa.true()))
            .order_by(newest_rows.c.started_at)
        )

    def series_keys(
        self, dag_ids: Iterable[str], limit: int, offset: int, **equal: str | None
    ) -> tuple[list[tuple], int]:
        """One page of the (cluster, workload, gpus, config_key) series of `dag_ids`' runs in key order, and
        how many there are: paged in SQL (DISTINCT, ORDER BY, LIMIT/OFFSET; the count aggregated there)."""
        t = results_table
        joined, allowed = results_of_runs(dag_ids)
        where = [allowed, *(t.c[n] == v for n, v in equal.items() if v is not None and v != "")]
        distinct = sa.select(*(t.c[k] for k in SERIES_KEY)).select_from(joined).where(*where).distinct().subquery()
        page = sa.select(distinct).order_by(*distinct.c).limit(int(limit)).offset(int(offset))
        with self._connect() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(distinct)).scalar() or 0
            return [tuple(row) for row in conn.execute(page)], int(total)

    def series_points(
        self, dag_ids: Iterable[str], key: dict, columns: Iterable[str], limit: int, offset: int
    ) -> pd.DataFrame:
        """One series' rows of `dag_ids`' runs, newest first, one page of them (LIMIT/OFFSET in SQL)."""
        t = results_table
        joined, allowed = results_of_runs(dag_ids)
        query = (
            sa.select(*(t.c[c] for c in columns))
            .select_from(joined)
            .where(allowed, *(t.c[k] == key[k] for k in SERIES_KEY))
            .order_by(t.c.started_at.desc(), t.c.dag_id)
            .limit(int(limit))
            .offset(int(offset))
        )
        with self._connect() as conn:
            return pd.read_sql(query, conn)

    def run_results(self, dag_ids: Iterable[str], suite_run_id: str, columns: Iterable[str]) -> pd.DataFrame:
        """The results rows of one suite run (of each of `dag_ids` that has a run with that id)."""
        t = results_table
        joined, allowed = results_of_runs(dag_ids)
        query = (
            sa.select(*(t.c[c] for c in columns))
            .select_from(joined)
            .where(allowed, t.c.suite_run_id == suite_run_id)
            .order_by(t.c.dag_id, t.c.workload, t.c.gpus)
        )
        with self._connect() as conn:
            return pd.read_sql(query, conn)
