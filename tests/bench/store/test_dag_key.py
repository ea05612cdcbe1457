"""Two suite DAGs whose runs share a run id keep their own rows (Alembic 0008: the DAG is in the key),
on SQLite and PostgreSQL; a store at 0007 keeps every row when it gains the key."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from bench.store.db import ResultsStore
from bench.store.migrate import SCHEMA_REVISION, alembic_config
from tests.bench.store.test_store import frame

RUN = "scheduled__2026-01-12T04:00:00+00:00"


def suite(dag_id: str | None, run: str = RUN) -> dict:
    return {"suite_run_id": run, "started_at": "2026-01-12T04:00:00", "cluster": "c", "passed": True, "dag_id": dag_id}


def store_at_0007(url: str) -> None:
    """A store as scalewatch left it before 0008, holding one DAG's suite run (3 scales) and a CLI sweep."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0007")
        for gpus in (1, 2, 4):
            conn.execute(
                sa.text(
                    "INSERT INTO results (suite_run_id, workload, gpus, cluster, config_key, started_at, accepted, "
                    "throughput_img_s) VALUES (:s, 'ssd', :g, 'c', 'k', '2026-01-05', true, :t)"
                ),
                {"s": "scheduled__2026-01-05", "g": gpus, "t": 100.0 * gpus},
            )
        conn.execute(
            sa.text("INSERT INTO results (suite_run_id, workload, gpus, cluster) VALUES ('sweep-1', 'ssd', 1, 'c')")
        )
        conn.execute(
            sa.text(
                "INSERT INTO suite_runs (suite_run_id, started_at, cluster, passed, dag_id) VALUES "
                "('scheduled__2026-01-05', '2026-01-05', 'c', true, 'scaling_regression__siteA'), "
                "('sweep-1', '2026-01-04', 'c', true, NULL)"
            )
        )
    engine.dispose()


def keys(store: ResultsStore) -> list[tuple]:
    rows = store.frame()
    return sorted(zip(rows["dag_id"], rows["suite_run_id"], rows["gpus"], strict=True))


def test_a_0007_store_gains_the_dag_key_keeping_every_row_and_a_rerun_changes_nothing(url):
    store_at_0007(url)
    store = ResultsStore(url)
    assert store.schema_version() == SCHEMA_REVISION
    site_a = [("scaling_regression__siteA", "scheduled__2026-01-05", g) for g in (1, 2, 4)]
    assert keys(store) == [("", "sweep-1", 1), *site_a]  # backfilled from suite_runs; a sweep has no DAG
    assert sorted(store.frame()["throughput_img_s"].dropna()) == [100.0, 200.0, 400.0]
    assert sorted(store.suite_runs()["dag_id"]) == ["", "scaling_regression__siteA"]
    with store.engine.begin() as conn:  # the migration run a second time over a store already keyed
        command.stamp(alembic_config(conn), "0007")
        command.upgrade(alembic_config(conn), "head")
        pk = sa.inspect(conn).get_pk_constraint("results")["constrained_columns"]
    assert pk == ["dag_id", "suite_run_id", "workload", "gpus"]
    assert keys(store) == [("", "sweep-1", 1), *site_a] and len(store.suite_runs()) == 2


def test_two_dags_with_the_same_run_id_keep_all_their_rows(url):
    store_at_0007(url)
    store = ResultsStore(url)
    store.upsert(frame(RUN, 100, "2026-01-12", gpus=(1, 2, 4)), suite("scaling_regression__siteA"))
    store.upsert(frame(RUN, 50, "2026-01-12", gpus=(1, 2)), suite("scaling_regression__siteB"))
    mine = store.frame()
    mine = mine[mine["suite_run_id"] == RUN]
    by_dag = {d: sorted(g["gpus"]) for d, g in mine.groupby("dag_id")}
    assert by_dag == {"scaling_regression__siteA": [1, 2, 4], "scaling_regression__siteB": [1, 2]}
    site_a = mine[mine["dag_id"] == "scaling_regression__siteA"].sort_values("gpus")
    assert list(site_a["throughput_img_s"]) == [100.0, 200.0, 400.0]  # not overwritten by siteB's figures
    runs = store.suite_runs()
    assert sorted(runs[runs["suite_run_id"] == RUN]["dag_id"]) == [
        "scaling_regression__siteA",
        "scaling_regression__siteB",
    ]
    # siteB's rerun without its 2-GPU scale removes its own stale row, never siteA's
    store.upsert(frame(RUN, 55, "2026-01-12", gpus=(1,)), suite("scaling_regression__siteB"))
    mine = store.frame()
    mine = mine[mine["suite_run_id"] == RUN]
    assert {d: sorted(g["gpus"]) for d, g in mine.groupby("dag_id")} == {
        "scaling_regression__siteA": [1, 2, 4],
        "scaling_regression__siteB": [1],
    }
    # a `bench sweep` (no suite, or no DAG) with that run id is a third owner
    store.upsert(frame(RUN, 10, "2026-01-12", gpus=(1,)))
    assert len(store.frame().query("suite_run_id == @RUN")) == 5


def test_history_still_spans_the_dags_of_a_cluster(url):
    """The regression history is per cluster, workload, GPUs and config: which DAG ran a week is not part of it."""
    store = ResultsStore(url)
    store.upsert(frame("w1", 100, "2026-01-01"), suite("scaling_regression__siteA", "w1"))
    store.upsert(frame("w2", 120, "2026-01-08"), suite("scaling_regression__siteB", "w2"))
    store.upsert(frame("w3", 80, "2026-01-15"))
    current = frame("now", 10, "2026-02-01")
    assert store.history_values(current, runs=8, exclude_suite="now") == [[80.0, 120.0, 100.0], [160.0, 240.0, 200.0]]
    series = store.accepted_series("c", "ssd", 1, "tiny/dali/bs8/img128/amp0")
    assert list(series["suite_run_id"]) == ["w1", "w2", "w3"]
