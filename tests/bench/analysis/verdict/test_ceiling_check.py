"""Issue 62, item 2: an ideal that cannot hide a loss. The node ceiling a scale is judged against is itself
checked, against one rank of the same run and against its own history on that node (a real SQLite results
store the evaluated runs are recorded in, as the suite records them); a ceiling that fell is replaced as the
ideal and the row says why."""

from __future__ import annotations

import pytest

from bench.analysis.verdict import expectations as names
from bench.analysis.verdict.evaluate import evaluate
from bench.results.schema import INDEPENDENT
from bench.store.db import ResultsStore
from tests.bench.analysis.verdict.test_interference import cfg, run  # noqa: F401 -- cfg: the fixture

HEALTHY = [run(1, 166.0), run(2, 290.0), run(2, 300.0, (), INDEPENDENT)]


def judged(cfg, runs, store=None, week: int = 9):  # noqa: F811
    started = f"2026-{10 + week // 4:02d}-{1 + 7 * (week % 4):02d}T00:00:00+00:00"  # one run a week
    ev = evaluate(cfg, f"w{week:02d}", runs, started, store)
    return ev, ev.frame.set_index("gpus")


def test_a_ceiling_under_one_rank_is_no_ideal_and_the_scale_is_judged_against_linear(cfg):  # noqa: F811
    """Two independent copies at 140 images/s where one rank alone ran 166: the 2-rank scale's 200 would be
    1.43 of that ceiling and pass; against linear (332) it is 0.60, under the 0.7 bound. Within a run's noise
    of one rank (160: ONE_RANK_MARGIN) the ceiling is used as measured."""
    ev, frame = judged(cfg, [run(1, 166.0), run(2, 200.0), run(2, 140.0, (), INDEPENDENT)])
    two = frame.loc[2]
    assert two["scaling_efficiency"] == pytest.approx(200.0 / 332.0), two.to_dict()
    assert two["independent_img_s"] == pytest.approx(140.0)  # the stored ceiling stays what was measured
    note = two["ceiling_note"]
    assert "node ceiling 140.0 images/s for 2 ranks is under one rank's 166.0" in note, note
    assert "judged against linear (332.0)" in note and "no foreign process on its cores" in note, note
    (failure,) = [f for f in ev.failures if f["expectation"] == names.SCALING_EFFICIENCY_AT_LEAST_BOUND]
    assert ev.verdict == "FAILED" and failure["gpus"] == 2, ev.failures
    reason = failure["reason"]  # the alert says why the ideal is linear
    assert reason.endswith("judged against linear (332.0)") and "; ceiling check: node ceiling" in reason, reason
    ev, frame = judged(cfg, [run(1, 166.0), run(2, 200.0), run(2, 160.0, (), INDEPENDENT)])
    assert ev.verdict == "PASSED" and frame.loc[2, "ceiling_note"] == "", frame.loc[2].to_dict()


def test_a_ceiling_that_fell_under_its_history_is_judged_against_its_median(cfg, tmp_path):  # noqa: F811
    """Six healthy weeks at a 300 images/s ceiling, recorded; then the node gives the copies 210 (above one
    rank's 166, so only history can tell) and the scale 200: 0.95 of that ceiling, 0.67 of the ceiling's
    history median. FAILED, the row naming the fall; a week whose ceiling holds is judged as measured."""
    store = ResultsStore(f"sqlite:///{tmp_path}/results.db")
    for week in range(6):
        ev, frame = judged(cfg, HEALTHY, store, week)
        assert ev.verdict == "PASSED" and frame.loc[2, "ceiling_note"] == "", frame.loc[2].to_dict()
        store.upsert(ev.frame)
    ev, frame = judged(cfg, [run(1, 166.0), run(2, 200.0), run(2, 210.0, (), INDEPENDENT)], store)
    two = frame.loc[2]
    assert two["scaling_efficiency"] == pytest.approx(200.0 / 300.0), two.to_dict()
    note = two["ceiling_note"]
    assert "node ceiling 210.0 images/s for 2 ranks fell under its history's floor" in note, note
    assert "(median 300.0 over 6 runs; no foreign process on its cores" in note and note.endswith("against 300.0"), note
    assert ev.verdict == "FAILED" and not bool(two["accepted"]), ev.failures
    # without the store (bench evaluate on a results table, no history) only one rank checks it: as measured
    ev, frame = judged(cfg, [run(1, 166.0), run(2, 200.0), run(2, 210.0, (), INDEPENDENT)])
    assert ev.verdict == "PASSED" and frame.loc[2, "ceiling_note"] == "", frame.loc[2].to_dict()
    # a ceiling at its history's level is judged as measured
    ev, frame = judged(cfg, [run(1, 166.0), run(2, 280.0), run(2, 295.0, (), INDEPENDENT)], store)
    assert ev.verdict == "PASSED" and frame.loc[2, "scaling_efficiency"] == pytest.approx(280.0 / 295.0)


def test_what_the_ceiling_run_saw_on_its_cores_is_named(cfg):  # noqa: F811
    """A foreign share under the interference bound (5%) in the ceiling run is what its note names."""
    _, frame = judged(cfg, [run(1, 166.0), run(2, 200.0), run(2, 140.0, (0.05, 0.05), INDEPENDENT)])
    note = frame.loc[2, "ceiling_note"]
    assert "its run saw on n1, busy (pid 4242) on core 1 took 5% of rank 0's cores" in note, note


def test_against_linear_the_ceiling_is_not_checked_and_no_note_says_so(cfg):  # noqa: F811
    """GPU slots (or a suite that asks for linear): the ceiling judges nothing, so it is left as measured."""
    linear = cfg.model_copy(update={"probe": cfg.probe.model_copy(update={"ideal": "linear"})})
    ev, frame = judged(linear, [run(1, 166.0), run(2, 300.0), run(2, 140.0, (), INDEPENDENT)])
    two = frame.loc[2]
    assert two["ideal"] == "linear" and two["ceiling_note"] == "", two.to_dict()
    assert two["independent_efficiency"] == pytest.approx(300.0 / 140.0) and ev.verdict == "PASSED"
