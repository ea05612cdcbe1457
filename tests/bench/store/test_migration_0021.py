"""Revision 0021 (issue 50: `results.run_type`) on SQLite and PostgreSQL: a store written before it keeps
every row and learns the run type only where Airflow's run id says it; a run stored after it carries its
own; the history page's runs table shows it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from bench.report.history import Filters, runs_table
from bench.store.db import ResultsStore
from bench.store.migrate import SCHEMA_REVISION, alembic_config
from tests.bench.store.test_store import frame

SUITE = {"cluster": "c", "passed": True, "config": "{}"}
BEFORE = {  # suite run id -> the run type 0021 finds for it
    "scaling_regression.scheduled__2026-01-05T03:00:00+00:00": "scheduled",
    "manual__2026-01-06T10:00:00+00:00": "manual",  # a run stored before suite run ids had the DAG prefix
    "sweep-20260107": None,  # `bench sweep`: its id says nothing, so nothing is guessed
    "scaling_regression.scheduled_x": None,  # not Airflow's `scheduled__` prefix
}


def test_0021_adds_run_type_from_airflows_run_ids_only_and_new_runs_carry_their_own(url):
    store = ResultsStore(url)
    for i, suite in enumerate(BEFORE):
        store.upsert(frame(suite, 100.0 + i, f"2026-01-0{i + 1}"), {"suite_run_id": suite, "dag_id": "d", **SUITE})
    with store.migration_connection() as conn:  # the store as 0018 left it
        command.downgrade(alembic_config(conn), "0018")
        assert "run_type" not in {c["name"] for c in sa.inspect(conn).get_columns("results")}
        assert conn.execute(sa.text("SELECT count(*) FROM results")).scalar() == 2 * len(BEFORE)
    store.engine.dispose()
    store = ResultsStore(url)  # opening it upgrades it
    assert store.schema_version() == SCHEMA_REVISION
    rows = store.frame()
    assert len(rows) == 2 * len(BEFORE)
    found = {r.suite_run_id: (r.run_type if isinstance(r.run_type, str) else None) for r in rows.itertuples()}
    assert found == BEFORE
    store.upsert(
        frame("scaling_regression.scheduled__2026-01-12T03:00:00+00:00", 110.0, "2026-01-12"),
        {
            "suite_run_id": "scaling_regression.scheduled__2026-01-12T03:00:00+00:00",
            "dag_id": "d",
            "run_type": "scheduled",
            **SUITE,
        },
    )
    store.upsert(frame("sweep-20260113", 111.0, "2026-01-13"), {"suite_run_id": "sweep-20260113", **SUITE})
    rows = store.frame()
    assert set(rows[rows["suite_run_id"].str.endswith("2026-01-12T03:00:00+00:00")]["run_type"]) == {"scheduled"}
    assert set(rows[rows["suite_run_id"] == "sweep-20260113"]["run_type"]) == {"manual"}  # `bench sweep`
    table = runs_table(rows, store.suite_runs(), Filters(), lambda _p: None, lambda _d, _r: None)
    shown = {r["suite_run_id"]: r["run_type"] for r in table}
    assert shown["scaling_regression.scheduled__2026-01-12T03:00:00+00:00"] == "scheduled"
    assert shown["sweep-20260107"] == "" and shown["sweep-20260113"] == "manual"
    with store.migration_connection() as conn:  # the downgrade drops the column, every row kept
        command.downgrade(alembic_config(conn), "0018")
        assert conn.execute(sa.text("SELECT count(*) FROM results")).scalar() == 2 * (len(BEFORE) + 2)
    store.engine.dispose()
