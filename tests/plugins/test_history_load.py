"""The history pages and API read a bounded slice of the store, whatever its size (issue 41, load): the
overview reads the newest RECENT_RUNS rows of each series, a series page at most SERIES_PAGE_RUNS runs of
it, an API page `limit` rows, each in the same number of statements, at 20 weeks of history and at 300.
A page that went back to reading the whole table (the 10x slowdown at 1,000 series x 156 weeks that
benchmark section 16 times) fails here by its row count, with no clock involved."""

from __future__ import annotations

import pandas as pd
import sqlalchemy as sa

from bench.store.db import ResultsStore
from tests.bench.store.conftest import url  # noqa: F401  (a store of its own, on SQLite and PostgreSQL)
from tests.infra.history_seed import SCALES, WORKLOADS, seed_many

SERIES = len(WORKLOADS) * len(SCALES)  # one cluster, one config


class Reads:
    """Statements run and rows read into frames while a page is built."""

    def __init__(self, store: ResultsStore, monkeypatch) -> None:
        self.statements = self.rows = 0
        sa.event.listen(store.engine, "before_cursor_execute", self._statement)
        original = pd.read_sql

        def counted(*args, **kwargs):
            frame = original(*args, **kwargs)
            self.rows += len(frame)
            return frame

        monkeypatch.setattr(pd, "read_sql", counted)

    def _statement(self, *_args) -> None:
        self.statements += 1

    def of(self, build) -> tuple[int, int]:
        self.statements = self.rows = 0
        build()
        return self.statements, self.rows


def _reads(store: ResultsStore, monkeypatch) -> dict[str, tuple[int, int]]:
    from bench.analysis.history.overview import series_id
    from bench.report.history import Filters
    from scalewatch.web.api import PointsQuery, series_points
    from scalewatch.web.app import _series_charts
    from scalewatch.web.overview import Scope, ceilings_for, lines_for, nodes_for

    dags = store.dag_ids()
    reads = Reads(store, monkeypatch)
    key = ("load-000", "ssd", 4, "cfg0")
    monkeypatch.setattr("scalewatch.web.api._store_and_dags", lambda _user: (store, dags))
    out = {
        "overview": reads.of(
            lambda: (lines_for(store, Scope(dags)), ceilings_for(store, Scope(dags)), nodes_for(store, Scope(dags)))
        ),
        "series": reads.of(lambda: _series_charts(store, dags, Filters(*key[:2], key[3], key[2]))),
        "api": reads.of(lambda: series_points(None, series_id(*key), PointsQuery(limit=10))),
    }
    sa.event.remove(store.engine, "before_cursor_execute", reads._statement)
    return out


def test_pages_read_a_bounded_slice_whatever_the_history_length(url, tmp_path, monkeypatch):  # noqa: F811
    from bench.analysis.history.overview import RECENT_RUNS
    from bench.report.history import SERIES_PAGE_RUNS

    monkeypatch.setenv("SCALEWATCH_OUTPUT_DIR", str(tmp_path / "runs"))
    short, long_url = ResultsStore(url), url.replace("legacy.db", "long.db") if url.startswith("sqlite") else None
    seed_many(short, 1, 20, configs=1)
    few = _reads(short, monkeypatch)
    if long_url is None:  # PostgreSQL: the same database, grown to 300 weeks
        with short.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM results")
            conn.exec_driver_sql("DELETE FROM suite_runs")
        long = short
    else:
        long = ResultsStore(long_url)
    assert seed_many(long, 1, 300, configs=1) == SERIES * 300
    many = _reads(long, monkeypatch)
    # the newest RECENT_RUNS rows of each series and the one suite run whose thresholds judge them all; the
    # node lines read the same newest rows again
    assert many["overview"] == few["overview"] and few["overview"][1] == 2 * SERIES * RECENT_RUNS + 1
    assert many["api"] == few["api"] and many["api"][1] == 11  # a page of 10 and the one that says "more"
    assert many["series"][0] == few["series"][0]  # the same statements
    assert few["series"][1] == 2 * 20 and many["series"][1] == 2 * SERIES_PAGE_RUNS  # its rows and their suite runs
    with long.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM results").scalar() == SERIES * 300
