"""Recording a run: its environment stored, a change point told what changed, annotations re-baselining."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.store.db import ResultsStore
from bench.suite.record import watch_changes
from tests.infra.history_seed import CONFIG_KEY, _rows

WEEKS, STEP = 24, 14


def week(store: ResultsStore, i: int, level: float, nccl: str, rng) -> pd.DataFrame:
    suite = f"w{i:03d}"
    started = (pd.Timestamp("2026-06-01T03:00:00", tz="UTC") + pd.Timedelta(weeks=i)).isoformat()
    thr2 = float(rng.normal(level, level * 0.01))
    frame = _rows(suite, started, "env-test", float(rng.normal(100.0, 1.0)), thr2, True, "pass")
    store.upsert(
        frame,
        {
            "suite_run_id": suite,
            "started_at": started,
            "cluster": "env-test",
            "passed": True,
            "report_path": "",
            "config": json.dumps({}),
            "dag_id": "d",
        },
    )
    store.upsert_environment("d", suite, {"nccl": nccl, "kernel": "6.1", "nodes": "gpu-01,gpu-02"})
    return frame


def test_a_change_point_names_what_changed_in_the_environment(tmp_path):
    store = ResultsStore(f"sqlite:///{tmp_path / 'r.db'}")
    rng = np.random.default_rng(7)
    notices = []
    for i in range(WEEKS):
        after = i >= STEP
        frame = week(store, i, 190.0 * (0.85 if after else 1.0), "2.23.4" if after else "2.21.5", rng)
        notices += watch_changes(store, frame, f"w{i:03d}")
    drops = [n for n in notices if n["kind"] == "change" and n["gpus"] == 2 and n["metric"] == "throughput_img_s"]
    assert drops, notices
    assert drops[0]["environment_change"].startswith("nccl 2.21.5 -> 2.23.4 from the run of 2026-09-07")
    assert "what changed: nccl 2.21.5 -> 2.23.4" in drops[0]["line"]


def test_an_annotated_change_rebaselines_the_floor_and_the_watch(tmp_path):
    store = ResultsStore(f"sqlite:///{tmp_path / 'r.db'}")
    rng = np.random.default_rng(8)
    frames = [week(store, i, 190.0 * (1.2 if i >= STEP else 1.0), "2.21.5", rng) for i in range(WEEKS)]
    changed_at = frames[STEP]["started_at"].iloc[0]
    store.upsert_annotation(
        {
            "cluster": "env-test",
            "workload": "ssd",
            "gpus": 2,
            "config_key": CONFIG_KEY,
            "metric": "throughput_img_s",
            "changed_at": changed_at,
            "kind": "expected",
            "note": "new storage firmware",
            "author": "admin",
            "created_at": "2026-10-01",
        }
    )
    last = frames[-1]
    two = last[last["gpus"] == 2].reset_index(drop=True)
    everything = store.history_values(two, 52, "none")[0]
    rebased = store.history_values(two, 52, "none", [changed_at])[0]
    assert len(everything) == WEEKS and len(rebased) == WEEKS - STEP
    assert min(rebased) > 200  # the old level no longer sets the floor
    # the change watch judges the series from the annotated change on: no change point before it is found again
    notices = watch_changes(store, last, last["suite_run_id"].iloc[0])
    assert all(n["changed_at"] >= changed_at for n in notices), notices
