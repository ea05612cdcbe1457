"""The pages' and the API's one way into the results store: read-only, one engine per URL, and only the
DAGs the user may read (Airflow's per-DAG check, once per DAG and request, never per row)."""

from __future__ import annotations

import threading

from scalewatch.web.auth import may_read_dag

_stores: dict[str, object] = {}
_stores_lock = threading.Lock()


def read_store(url: str):
    """One read-only store per URL for the process's life; its schema checked on every view (one row)."""
    from bench.store.db import ResultsStore

    with _stores_lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = ResultsStore.open_read_only(url)
    store.check_head()
    return store


def readable_dags(user, store) -> list[str]:
    """The DAGs whose stored runs `user` may read ('' is a run made outside Airflow: DAGs in general)."""
    return [d for d in store.dag_ids() if may_read_dag(user, d or None)]


def thresholds_of(store, dag_ids: list[str], run_ids) -> dict:
    """suite run id -> the Thresholds its config held (only the runs asked for: the series' latest), read
    by the one stored-config reader (bench.results.stored: the defaults where it held none)."""
    from bench.results.stored import thresholds_or_defaults

    runs = store.suite_runs(dag_ids, ids=run_ids).itertuples()
    return {str(run.suite_run_id): thresholds_or_defaults(run.config) for run in runs}


def thresholds_by_dag(store, dag_ids: list[str], run_id: str) -> dict:
    """DAG id -> the Thresholds its run `run_id` held (several DAGs may hold runs of one suite run id)."""
    from bench.results.stored import thresholds_or_defaults

    runs = store.suite_runs(dag_ids, ids=[run_id]).itertuples()
    return {str(run.dag_id): thresholds_or_defaults(run.config) for run in runs}
