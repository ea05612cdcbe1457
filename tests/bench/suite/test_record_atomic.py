"""Recording a run keeps its rows and its files together: a failure part-way leaves neither (the previous
attempt's, if any, stay), and recording it again repairs everything without a duplicate row or a lost
change notice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.analysis.verdict.evaluate import Evaluation
from bench.config.models import SweepConfig, TrainConfig
from bench.store.db import ResultsStore
from bench.suite.plan import suite_dir
from bench.suite.record import record, watch_changes
from tests.bench.store.conftest import url  # noqa: F401 -- the fixture: a store of its own, SQLite and PostgreSQL
from tests.bench.store.test_store import frame

LEVELS = [1000.0] * 40 + [880.0] * 6  # a 12% drop after week 40, confirmed within three runs
RUN_FILES = ("report.html", "results.csv", "suite.json")  # what recording a run leaves in its folder
SAMPLE = {"t": 0.0, "rank": 0, "read_bytes": 0, "cpu_util": 10.0}


def started(week: int) -> str:
    return (pd.Timestamp("2026-01-05", tz="UTC") + pd.Timedelta(weeks=week)).isoformat()


def week_frame(week: int, rng) -> pd.DataFrame:
    level = LEVELS[week]
    run = frame(f"weekly-{week:03d}", float(rng.normal(level, level * 0.015)), started(week), gpus=(1,))
    return run.assign(baseline_gpus=1, verdict="PASSED", slots="[]")  # as the evaluation leaves it


def confirming_week(tmp_path: Path) -> int:
    """The week whose run confirms the drop, found on a scratch store with the same runs."""
    scratch = ResultsStore(f"sqlite:///{tmp_path}/scratch.db")
    rng = np.random.default_rng(0)
    for week in range(len(LEVELS)):
        f = week_frame(week, rng)
        scratch.upsert(f)
        if any(n["kind"] == "change" for n in watch_changes(scratch, f, f"weekly-{week:03d}")):
            scratch.engine.dispose()
            return week
    raise AssertionError("the drop was never confirmed")


def run_with_samples(folder: Path, lines: list[str]) -> dict:
    """A completed scale whose rank left these lines in its samples file (its timeline chart in the report)."""
    metrics = folder / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    (metrics / "samples-rank0.jsonl").write_text("\n".join(lines) + "\n")
    return {"workload": "ssd", "gpus": 1, "result": {"state": "COMPLETED", "output_dir": str(folder)}}


def of_run(store: ResultsStore, suite: str) -> tuple[int, int, int]:
    """(results rows, suite_runs rows, change points confirmed) of one suite run in the store."""
    results = store.frame()
    runs = store.suite_runs()
    changes = store.change_alerts()
    return (
        int((results["suite_run_id"] == suite).sum()),
        int((runs["suite_run_id"] == suite).sum()),
        int((changes["detected_in"] == suite).sum()),
    )


def test_a_failure_after_the_rows_leaves_neither_and_a_rerun_repairs_without_duplicates(tmp_path, url):  # noqa: F811
    confirm = confirming_week(tmp_path)
    store = ResultsStore(url)
    rng = np.random.default_rng(0)
    for week in range(confirm):
        f = week_frame(week, rng)
        store.upsert(f)
        watch_changes(store, f, f"weekly-{week:03d}")
    suite = f"weekly-{confirm:03d}"
    data = str(tmp_path / "data")
    cfg = SweepConfig(
        dataset_path=data, train=TrainConfig(workload="ssd", data=data, steps=6), output_dir=str(tmp_path), cluster="c"
    )
    f = week_frame(confirm, rng)
    ev = Evaluation(frame=f, passed=True, failures=[], warnings=[], data_docs=None)
    out = suite_dir(Path(cfg.output_dir), suite)
    out.mkdir(parents=True)  # the run's folder, as its training tasks left it
    good = [json.dumps(SAMPLE | {"t": float(t), "read_bytes": 1_000_000 * t}) for t in range(4)]
    # a rank killed while writing: its samples file ends mid-line, and drawing the report fails on it
    torn = run_with_samples(tmp_path / "scale-1", [*good, '{"t": 4.0, "read_by'])

    with pytest.raises(ValueError):
        record(cfg, suite, ev, [torn], started(confirm), store, "scaling_regression")
    assert of_run(store, suite) == (0, 0, 0)  # no rows, no suite run, no change point without the report
    assert sorted(p.name for p in out.iterdir()) == []  # nor files: no report, suite.json or results.csv

    fixed = run_with_samples(tmp_path / "scale-1", good)
    first = record(cfg, suite, ev, [fixed], started(confirm), store, "scaling_regression")
    assert of_run(store, suite) == (1, 1, 1)
    assert [c["kind"] for c in first["changes"]] == ["change"]
    assert store.change_alerts()["state"].tolist() == ["pending"]  # news, not sent yet
    assert "Change points confirmed by this run" in (out / "report.html").read_text()
    assert json.loads((out / "suite.json").read_text())["dag_id"] == "scaling_regression"
    assert sorted(p.name for p in out.iterdir()) == sorted(RUN_FILES)  # nothing staged or kept aside is left

    # recording it again (a retried task) repeats the same notices and rows, never a second copy or none
    again = record(cfg, suite, ev, [fixed], started(confirm), store, "scaling_regression")
    assert of_run(store, suite) == (1, 1, 1) and len(store.change_alerts()) == 1
    assert [c["line"] for c in again["changes"]] == [c["line"] for c in first["changes"]]

    # a later attempt that fails keeps the last good one whole: its rows and its files
    before = {name: (out / name).read_bytes() for name in RUN_FILES}
    broken = run_with_samples(tmp_path / "scale-1", [*good, "{"])
    with pytest.raises(ValueError):
        record(cfg, suite, ev, [broken], started(confirm), store, "scaling_regression")
    assert of_run(store, suite) == (1, 1, 1)
    assert {name: (out / name).read_bytes() for name in RUN_FILES} == before
    assert sorted(p.name for p in out.iterdir()) == sorted(RUN_FILES)
