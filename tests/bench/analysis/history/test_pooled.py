"""The pooled cluster test (issue 63) on clusters drawn with fixed seeds: a shared drop is one cluster
change naming what moved, one series' own step or one bad week is not, the correlation the series share
in quiet weeks is not mistaken for a change, and a cluster too small to pool says so."""

import numpy as np
import pytest

from bench.analysis.history import pooled
from bench.analysis.history.pooled import PoolSeries, judge_pool, replay_pool

KINDS = ("storage-bound", "compute-bound", "communication", "checkpoint")


def cluster(seed: int, weeks: int, size: int = 4, own: float = 0.01, shared: float = 0.005) -> np.ndarray:
    rng = np.random.default_rng(seed)
    common = rng.normal(0, shared, weeks)
    return rng.uniform(100, 5000, size)[:, None] * np.exp(rng.normal(0, own, (size, weeks)) + common)


def members(values: np.ndarray) -> list[PoolSeries]:
    return [PoolSeries(f"s{i}", KINDS[i % 4], v) for i, v in enumerate(values)]


def changes(values: np.ndarray) -> list[pooled.ClusterEvent]:
    return [e for e in replay_pool(members(values), values.shape[1]).events if e.kind == pooled.CHANGE]


def test_a_shared_3pct_drop_is_watch_after_one_run_and_one_cluster_change_after_two():
    values = cluster(6301, 54)
    values[:, 52:] *= 0.97
    ref = np.arange(0, 52)
    one = judge_pool(members(values[:, :53]), ref, [52])
    assert (one.status, one.runs) == (pooled.WATCH, 1)  # one bad week across the cluster: shown, not alerted
    two = judge_pool(members(values), ref, [52, 53])
    assert (two.status, two.runs) == (pooled.CHANGE, 2)
    assert two.ci_low < 0.03 < two.ci_high and two.ci_low > 0
    assert two.moved == ("s0", "s1", "s2", "s3") and two.unmoved == () and two.series_total == 4
    (event,) = changes(values)
    assert (event.at, event.detected) == (52, 53)


def test_the_kind_that_moved_most_is_named_and_the_series_that_did_not_move_too():
    values = cluster(6302, 54, size=6)
    values[[0, 4], 52:] *= 0.92  # the storage-bound pair drops 8%, the rest 1%
    values[[1, 2, 3, 5], 52:] *= 0.99
    found = judge_pool(members(values), np.arange(52), [52, 53])
    assert found.status == pooled.CHANGE
    assert found.kind == "storage-bound"
    assert set(found.moved) >= {"s0", "s4"} and "s0" not in found.unmoved
    assert found.kinds["storage-bound"] == pytest.approx(0.08, abs=0.03)


def test_one_series_own_step_is_never_a_cluster_change():
    """A 10% step of one series is 9 of its spreads: the pooled drop must stand without the series that
    dropped most (pooled._without_top), so no cluster change is found at the step or in the 28 weeks after
    it (a change the quiet weeks before it raise is the pool's own false-alarm rate, benchmark section 22,
    not this)."""
    for seed in range(6310, 6320):
        values = cluster(seed, 80)
        values[0, 52:] *= 0.90
        assert [e for e in changes(values) if e.at >= 49] == [], seed


def test_a_shared_weekly_component_is_read_from_history_not_taken_for_a_change():
    """Series that share most of their week-to-week noise (1% shared, 0.5% own): their pooled figure is
    hardly quieter than one series, and the pooled spread is read from the pooled history. Taken as
    independent (the spread over the square root of the series), ordinary weeks would be changes."""
    found = [changes(cluster(seed, 104, own=0.005, shared=0.01)) for seed in range(6320, 6326)]
    assert sum(len(f) for f in found) == 0


def test_a_confirmed_shared_drop_that_comes_back_sends_one_recovery():
    values = cluster(6331, 80)
    values[:, 52:62] *= 0.96
    events = replay_pool(members(values), 80).events
    assert [e.kind for e in events] == [pooled.CHANGE, pooled.RECOVERED]
    assert 51 <= events[0].at <= 52 and events[1].at == 62  # the drop's place within a run; the first run back
    assert replay_pool(members(values), 80).status == pooled.OK
    assert events[1].closes == events[0].at  # the recovery names the change it closes


def test_a_second_drop_that_comes_back_closes_only_itself():
    """A shared drop at 52 that stays, a second at 88 that goes back at 96: the recovery closes the second
    (the store marks only that change recovered: one note, and no false one for the first)."""
    values = cluster(6332, 104)
    values[:, 52:] *= 0.96
    values[:, 88:96] *= 0.96
    events = replay_pool(members(values), 104).events
    assert [e.kind for e in events] == [pooled.CHANGE, pooled.CHANGE, pooled.RECOVERED], events
    assert events[2].closes == events[1].at != events[0].at and events[2].at == 96


def test_a_cluster_with_too_few_series_with_history_pools_nothing_and_says_so():
    values = cluster(6332, 60, size=3)
    values[:, 52:] *= 0.9
    short = members(values)
    short[2] = PoolSeries("new", "checkpoint", np.r_[np.full(55, np.nan), values[2, 55:]])
    found = judge_pool(short, np.arange(52), [52, 53])
    assert found.status == pooled.OK
    assert "2 series with history, 3 needed: nothing pooled" in found.note
    assert found.excluded == ("new",) and "left out (too little history): new" in found.note
