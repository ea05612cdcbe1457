"""The weekly change watch over a real results store: one alert per change point, one recovery note,
nothing for a rerun or for history older than the check."""

import numpy as np
import pandas as pd
import pytest

from bench.analysis.history.changes import series_outliers
from bench.store.db import ResultsStore
from bench.suite.record import watch_changes
from tests.bench.store.test_store import frame


def weekly(store: ResultsStore, levels: list[float], seed: int = 0, start: str = "2026-01-05") -> list[list[dict]]:
    """Store one accepted run a week at these throughput levels (1.5% noise); the notices of each week."""
    rng = np.random.default_rng(seed)
    out = []
    for week, level in enumerate(levels):
        suite = f"weekly-{week:03d}"
        started = (pd.Timestamp(start, tz="UTC") + pd.Timedelta(weeks=week)).isoformat()
        f = frame(suite, float(rng.normal(level, level * 0.015)), started, gpus=(1,))
        store.upsert(f)
        out.append(watch_changes(store, f, suite))
    return out


@pytest.fixture
def store(tmp_path):
    return ResultsStore(f"sqlite:///{tmp_path}/r.db")


def test_a_drop_alerts_once_and_its_recovery_once(store):
    levels = [1000.0] * 40 + [900.0] * 12 + [1000.0] * 12
    notices = weekly(store, levels)
    sent = [(week, n) for week, found in enumerate(notices) for n in found]
    changes = [(w, n) for w, n in sent if n["kind"] == "change"]
    recovered = [(w, n) for w, n in sent if n["kind"] == "recovered"]
    assert len(changes) == 1 and len(recovered) == 1, [n["line"] for _, n in sent]
    week, change = changes[0]
    assert 41 <= week <= 43  # confirmed within three runs of the drop
    assert change["metric"] == "throughput_img_s" and change["change"] == pytest.approx(-0.10, abs=0.025)
    assert change["changed_at"].startswith(str((pd.Timestamp("2026-01-05") + pd.Timedelta(weeks=40)).date()))
    assert "regression" in change["line"] and "-1" in change["line"]
    week, note = recovered[0]
    assert 53 <= week <= 55 and "recovered" in note["line"]
    stored = store.change_alerts()
    assert sorted(stored["state"]) == ["recovered", "recovery"]  # the drop, and the step back up (not re-sent)


def test_a_regression_fixed_three_weeks_later_is_two_change_points_and_one_recovery(store):
    """Within MATCH_RUNS of each other but going opposite ways: the fix is not the regression refined."""
    notices = weekly(store, [1000.0] * 40 + [880.0] * 3 + [1000.0] * 10, seed=7)
    sent = [n for found in notices for n in found]
    assert [n["kind"] for n in sent] == ["change", "recovered"], [n["line"] for n in sent]
    stored = store.change_alerts().sort_values("changed_at")
    assert list(stored["state"]) == ["recovered", "recovery"]
    assert stored["size"].iloc[0] == pytest.approx(-0.12, abs=0.03) and stored["change"].iloc[0] < 0
    assert stored["size"].iloc[1] > 0


def test_a_change_stored_before_sizes_were_kept_is_found_again_by_its_sign(store):
    """A row from before migration 0007 (size NULL) is matched by the sign of its change: no second alert."""
    notices = weekly(store, [1000.0] * 40 + [880.0] * 3)
    assert sum(n["kind"] == "change" for found in notices for n in found) == 1
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE change_alerts SET size = NULL")
    assert not any(weekly(store, [1000.0] * 40 + [880.0] * 6))  # the same runs again, then three more
    assert len(store.change_alerts()) == 1


def test_a_rerun_of_the_confirming_run_sends_nothing_again(store):
    notices = weekly(store, [1000.0] * 40 + [880.0] * 3)
    assert [n["kind"] for n in notices[-1]] == ["change"] or [n["kind"] for n in notices[-2]] == ["change"]
    last = store.frame()
    last = last[last["suite_run_id"] == last["suite_run_id"].max()]
    assert watch_changes(store, last, last["suite_run_id"].iloc[0]) == []
    assert len(store.change_alerts()) == 1


def test_change_points_older_than_the_check_are_recorded_not_alerted(store):
    """A store filled before this check ran: its old step shows on the dashboard, no one is paged for it."""
    levels = [1000.0] * 30 + [880.0] * 30
    rng = np.random.default_rng(3)
    for week, level in enumerate(levels):
        started = (pd.Timestamp("2025-01-06", tz="UTC") + pd.Timedelta(weeks=week)).isoformat()
        store.upsert(frame(f"old-{week:03d}", float(rng.normal(level, level * 0.015)), started, gpus=(1,)))
    f = frame("new-000", 880.0, pd.Timestamp("2026-03-02", tz="UTC").isoformat(), gpus=(1,))
    store.upsert(f)
    assert watch_changes(store, f, "new-000") == []
    stored = store.change_alerts()
    assert list(stored["state"]) == ["recorded"] and stored["changed_in"].iloc[0] == "old-030"


def test_a_steady_year_sends_nothing(store):
    assert not any(weekly(store, [1000.0] * 52, seed=5))
    assert store.change_alerts().empty


def test_a_one_week_dip_sends_no_change_and_is_listed_as_an_outlier(store):
    """A bad node's week: the floor alerts it that week; the change watch never calls it a change point."""
    notices = weekly(store, [1000.0] * 30 + [700.0] + [1000.0] * 8, seed=9)
    assert not any(notices) and store.change_alerts().empty
    series = store.accepted_series("c", "ssd", 1, "tiny/dali/bs8/img128/amp0")
    assert list(series_outliers(series, "throughput_img_s")["suite_run_id"]) == ["weekly-030"]
    assert series_outliers(series.iloc[:31], "throughput_img_s").empty  # its own week cannot tell yet


def test_a_step_right_after_a_dip_is_alerted_within_three_runs_where_it_happened(store):
    notices = weekly(store, [1000.0] * 40 + [700.0] + [900.0] * 8, seed=10)
    sent = [(week, n) for week, found in enumerate(notices) for n in found]
    assert len(sent) == 1, [n["line"] for _, n in sent]
    week, change = sent[0]
    assert change["kind"] == "change" and week <= 41 + 3
    assert change["changed_in"] == "weekly-041" and change["size"] == pytest.approx(-0.10, abs=0.025)
