"""The pages' and the API's one way into the results store: read-only, one engine per URL, and only the
DAGs the user may read (Airflow's per-DAG check, once per DAG and request, never per row)."""

from __future__ import annotations

import json
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


def _thresholds(config) -> dict:
    try:
        config = json.loads(config) if isinstance(config, str) and config else {}
    except ValueError:
        config = {}
    return (config if isinstance(config, dict) else {}).get("thresholds") or {}


def thresholds_of(store, dag_ids: list[str], run_ids) -> dict[str, dict]:
    """suite run id -> the thresholds its config held (only the runs asked for: the series' latest)."""
    return {
        str(run.suite_run_id): _thresholds(run.config) for run in store.suite_runs(dag_ids, ids=run_ids).itertuples()
    }


def thresholds_by_dag(store, dag_ids: list[str], run_id: str) -> dict[str, dict]:
    """DAG id -> the thresholds its run `run_id` held (several DAGs may hold runs of one suite run id)."""
    return {str(run.dag_id): _thresholds(run.config) for run in store.suite_runs(dag_ids, ids=[run_id]).itertuples()}
