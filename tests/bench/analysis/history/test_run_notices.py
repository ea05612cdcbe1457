"""A run's notices read back from the store are the ones the change watch found new for it: a drop and
its recovery, week by week, and again when a run is recorded a second time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.store.db import ResultsStore
from bench.suite.record import run_changes, watch_changes
from tests.bench.store.test_store import frame


def test_each_weeks_notices_read_back_are_the_ones_found_new(tmp_path):
    store = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    rng = np.random.default_rng(0)
    levels = [1000.0] * 40 + [900.0] * 12 + [1000.0] * 12  # test_changes: one drop, one recovery
    kinds = []
    for week, level in enumerate(levels):
        suite = f"weekly-{week:03d}"
        started = (pd.Timestamp("2026-01-05", tz="UTC") + pd.Timedelta(weeks=week)).isoformat()
        f = frame(suite, float(rng.normal(level, level * 0.015)), started, gpus=(1,))
        store.upsert(f)
        found = watch_changes(store, f, suite)
        read = run_changes(store, f, suite)
        assert sorted(n["line"] for n in read) == sorted(n["line"] for n in found), week
        assert watch_changes(store, f, suite) == [] and run_changes(store, f, suite) == read  # recorded again
        kinds += [n["kind"] for n in read]
    assert kinds == ["change", "recovered"]
