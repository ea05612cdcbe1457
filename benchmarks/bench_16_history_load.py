"""Benchmark section 16: the history pages and API under load (issue 41): 1,000 series x 156 weekly runs in
PostgreSQL (156,000 results rows, 15,600 suite runs), server time of the overview, a series page and an API
page, each the median of 10 requests with a distribution-free 95% interval of that median.

Server time is the handler's own work, as the plugin runs it per request: the store's queries, the
overview's judging, the charts and the template (or the JSON body), with one read-only engine kept
across requests as the web server keeps it. Airflow's login and per-DAG check are outside the figure
(one auth-manager call per DAG, not per row). The store comes from $SCALEWATCH_TEST_PG_URL (scripts/bench.sh
starts a throwaway PostgreSQL when none is set); the section makes a database of its own there and
drops it. SCALEWATCH_BENCH16_CLUSTERS (20 series each; default 50) and SCALEWATCH_BENCH16_WEEKS (default
156) shrink it for a quick look; the row says the scale it ran at.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid

import numpy as np
from runner import ROOT, Context, main_for

NUMBER = 16
TITLE = "history load"
REQUESTS = 10  # the "median of 10"
TARGETS = {
    "overview": "<= 1.0 s",
    "series page": "<= 0.5 s",
    "API page (/api/series/{id}/points)": "<= 0.3 s",
    "API page (/api/series)": "<= 0.3 s",
    "API page (/api/series?order=worst)": "none: judges every series, as the overview does",
}


def median_interval(times: list[float]) -> tuple[float, float, float]:
    """Median and a distribution-free interval of it: the 2nd and 9th of 10 sorted times cover the
    median with probability 1 - 2 P(Binomial(10, 1/2) <= 1) = 97.9% (>= 95%)."""
    ordered = sorted(times)
    return float(np.median(ordered)), ordered[1], ordered[-2]


@contextlib.contextmanager
def _database(admin_url: str):
    import sqlalchemy as sa

    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"sw_bench16_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def _timed(fn) -> list[float]:
    fn()  # the first request opens the engine and warms PostgreSQL's cache: not counted
    times = []
    for _ in range(REQUESTS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _requests(url: str) -> dict:
    """Each measured request as the plugin serves it, less the login (every DAG readable)."""
    sys.path.insert(0, str(ROOT / "plugins"))
    os.environ["SCALEWATCH_RESULTS_URL"] = url
    os.environ["SCALEWATCH_RESULTS_CONN_ID"] = "scalewatch_results_bench16_none"
    import scalewatch.web.app as app
    import scalewatch.web.reading as reading
    from bench.analysis.history.overview import series_id
    from scalewatch.web import api

    def every_dag(_user, store):
        return store.dag_ids()

    app.readable_dags = reading.readable_dags = every_dag
    key = ("load-000", "ssd", 4, "cfg0")
    series = app.PageQuery(cluster=key[0], workload=key[1], config=key[3], gpus=key[2])

    def must(response):
        assert response.status_code == 200, response.body[:500]

    return {
        "overview": lambda: must(app._history_page(None, app.PageQuery())),
        "series page": lambda: must(app._history_page(None, series)),
        "API page (/api/series/{id}/points)": lambda: api.series_points(None, series_id(*key), api.PointsQuery()),
        "API page (/api/series)": lambda: api.series_page(None, api.SeriesQuery()),
        "API page (/api/series?order=worst)": lambda: api.series_page(None, api.SeriesQuery(order="worst")),
    }


def history_load(add) -> None:
    admin = os.environ.get("SCALEWATCH_TEST_PG_URL")
    if not admin:
        add("16 history load", "server time per request", "not run", "needs PostgreSQL: source scripts/postgres.sh")
        return
    from bench.store.db import ResultsStore
    from tests.infra.history_seed import seed_many

    clusters = int(os.environ.get("SCALEWATCH_BENCH16_CLUSTERS", "50"))
    weeks = int(os.environ.get("SCALEWATCH_BENCH16_WEEKS", "156"))
    with _database(admin) as url:
        store = ResultsStore(url)
        t0 = time.perf_counter()
        rows = seed_many(store, clusters, weeks)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
        store.engine.dispose()
        scale = f"{clusters * 20} series x {weeks} weeks ({rows} rows, seeded in {time.perf_counter() - t0:.0f} s)"
        for name, request in _requests(url).items():
            med, low, high = median_interval(_timed(request))
            add(
                "16 history load",
                f"{name}: server time, median of {REQUESTS} (s)",
                f"{med:.3f}",
                f"target {TARGETS[name]}; 95% CI of the median [{low:.3f}, {high:.3f}]; {scale}",
            )
        from scalewatch.web.reading import _stores

        for opened in _stores.values():
            opened.engine.dispose()


def run(ctx: Context) -> None:
    history_load(ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
