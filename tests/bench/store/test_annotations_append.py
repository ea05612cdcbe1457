"""Annotations are a log: every word on a change point is kept with who, when and under which DAG, the
newest one counts; and the store names every DAG whose runs hold a series, so that the web layer can ask
for edit permission on each before one of them re-baselines it (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from bench.analysis.history.annotations import baseline_since
from bench.errors import ConfigError
from bench.store.db import ResultsStore
from tests.bench.store.test_store import frame

KEY = "tiny/dali/bs8/img128/amp0"  # the config key of test_store.frame's rows
POINT = {
    "cluster": "c",
    "workload": "ssd",
    "gpus": 1,
    "config_key": KEY,
    "metric": "throughput_img_s",
    "changed_at": "2026-03-02T00:00:00+00:00",
}


def stored_run(store: ResultsStore, suite: str, dag_id: str, started: str, gpus=(1, 2)) -> None:
    store.upsert(frame(suite, 100.0, started, gpus=gpus), {"suite_run_id": suite, "cluster": "c", "dag_id": dag_id})


def test_every_word_on_a_change_point_is_kept_and_the_newest_counts(url):
    store = ResultsStore(url)
    first = store.add_annotation(
        POINT | {"kind": "expected", "note": "new firmware", "author": "alice", "dag_id": "scaling_regression"}
    )
    second = store.add_annotation(
        POINT
        | {
            "kind": "explained",
            "note": "no: a half-dead disk",
            "author": "bob",
            "dag_id": "scaling_regression__example",
            "created_at": "2026-03-10T09:00:00+00:00",
        }
    )
    assert second["id"] > first["id"] and first["created_at"]  # stamped when not given
    log = store.annotation_history("c")
    assert log["author"].tolist() == ["alice", "bob"]
    assert log["note"].tolist() == ["new firmware", "no: a half-dead disk"]
    assert log["dag_id"].tolist() == ["scaling_regression", "scaling_regression__example"]
    now = store.annotations("c")
    assert len(now) == 1 and now["author"].iloc[0] == "bob" and now["kind"].iloc[0] == "explained"
    assert baseline_since(now, "c", "ssd", 1, KEY) == POINT["changed_at"]  # the series still re-baselines once
    with pytest.raises(ConfigError, match=r"missing field\(s\) author"):
        store.add_annotation(POINT | {"kind": "expected", "note": "n", "dag_id": ""})
    assert len(store.annotation_history()) == 2  # a refused one stores nothing


def test_the_deprecated_upsert_appends_under_the_dag_of_the_change_points_run(url):
    """What the web layer calls until it passes the DAG itself: no word replaces another any more."""
    store = ResultsStore(url)
    stored_run(store, "w1", "scaling_regression", POINT["changed_at"], gpus=(1,))
    store.upsert_change(POINT | {"changed_in": "w1", "detected_in": "w1", "state": "pending", "change": -0.1})
    for note in ("first word", "second word"):
        with pytest.warns(DeprecationWarning, match="add_annotation"):
            store.upsert_annotation(POINT | {"kind": "expected", "note": note, "author": "admin", "created_at": "t"})
    log = store.annotation_history()
    assert log["note"].tolist() == ["first word", "second word"]
    assert log["dag_id"].tolist() == ["scaling_regression"] * 2
    assert store.annotations()["note"].tolist() == ["second word"]


def test_the_dags_of_a_series_are_every_dag_whose_runs_hold_it(url):
    store = ResultsStore(url)
    stored_run(store, "w1", "scaling_regression", "2026-03-02")
    stored_run(store, "w1", "scaling_regression__example", "2026-03-02", gpus=(1,))  # the same run id, another DAG
    stored_run(store, "s1", "", "2026-03-03", gpus=(2,))  # `bench sweep`
    assert store.dag_ids_of_series("c", "ssd", 1, KEY) == ["scaling_regression", "scaling_regression__example"]
    assert store.dag_ids_of_series("c", "ssd", 2, KEY) == ["", "scaling_regression"]
    assert store.dag_ids_of_series("c", "ssd", 4, KEY) == []
    assert store.dag_ids_of_series("other", "ssd", 1, KEY) == []
