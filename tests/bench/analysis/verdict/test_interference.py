"""Issue 62: a verdict that stays right when something else runs on the node.

The suite's own judgement of a scale's figures (bench.analysis.verdict.evaluate over run results, as the DAG's
evaluate task calls it): a scale or node ceiling measured under interference is INCONCLUSIVE naming the process
on each node, judged on its re-measure where one ran clean; more ranks slower than fewer never passes; a
bound miss is FAILED only when its second run misses too. The same rules on real ranks beside a real busy loop:
tests/scripts/test_run_once.py."""

from __future__ import annotations

import json

import pytest

from bench.analysis.verdict import expectations as names
from bench.analysis.verdict.demand import FAR_BELOW, idle_reason
from bench.analysis.verdict.evaluate import evaluate
from bench.analysis.verdict.interference import INTERFERENCE_SHARE, remeasure_plan, settled
from bench.config.models import SweepConfig, TrainConfig
from bench.results.schema import INDEPENDENT, REMEASURE, REMEASURE_INDEPENDENT, REPEAT
from tests.bench.launch.summaries import valid_summary

NEIGHBOUR = "busy (pid 4242) on core 1"


def _rank(rank: int, rate: float, foreign: float) -> dict:
    base = valid_summary()["per_rank"][0]
    breakdown = {**base["breakdown"], "foreign_cpu_share": foreign, "foreign_top": NEIGHBOUR if foreign else None}
    return {
        **base,
        "rank": rank,
        "host": "n1",
        "images_per_s": rate,
        "images": int(rate * 10),
        "measured_s": 10.0,
        "step_times_s": [0.1] * 20,
        "slot": {**base["slot"], "cpus": [rank]},
        "breakdown": breakdown,
    }


def result(ranks: int, rate: float, foreign: tuple[float, ...] = ()) -> dict:
    """A completed run of `ranks` ranks at `rate` images/s, rank i losing foreign[i] of its cores."""
    shares = list(foreign) + [0.0] * (ranks - len(foreign))
    per_rank = [_rank(i, rate / ranks, shares[i]) for i in range(ranks)]
    summary = valid_summary(
        ranks=ranks,
        images_per_s=rate,
        images_per_s_per_rank=[rate / ranks] * ranks,
        measured_s=10.0,
        per_rank=per_rank,
    )
    return {"state": "COMPLETED", "reason": "", "summary": summary}


def run(gpus: int, rate: float, foreign: tuple[float, ...] = (), variant: str = "") -> dict:
    return {"workload": "ssd", "gpus": gpus, "variant": variant, "result": result(gpus, rate, foreign)}


@pytest.fixture
def cfg(tmp_path) -> SweepConfig:
    """CPU slots: the 2-rank scale is judged against its node ceiling (independent copies), bound 0.7."""
    train = TrainConfig(workload="ssd", synthetic=True, steps=1)
    return SweepConfig(
        dataset_path=tmp_path,
        output_dir=tmp_path,
        train=train,
        gpus=[1, 2],
        gpus_per_node=0,
        min_scaling_efficiency=0.7,
        max_step_time_spread=100.0,
    )


def judged(cfg: SweepConfig, runs: list[dict]):
    ev = evaluate(cfg, "r1", runs, "2026-12-07T00:00:00+00:00")
    return ev, ev.frame.set_index("gpus")


def test_a_scale_and_its_ceiling_beside_a_busy_neighbour_are_inconclusive_naming_it_never_passed(cfg):
    """The issue's false PASS: two ranks slower than one, judged 0.75 against a ceiling that ran beside the
    same loop. Now INCONCLUSIVE, the reason naming the process, the node and the share; never PASSED."""
    runs = [run(1, 166.0), run(2, 128.0, (0.0, 0.5)), run(2, 170.0, (0.0, 0.5), INDEPENDENT)]
    ev, frame = judged(cfg, runs)
    two = frame.loc[2]
    assert ev.verdict == "INCONCLUSIVE" and two["verdict"] == "inconclusive", two.to_dict()
    reason = two["inconclusive_reason"]
    assert reason.startswith("interference:") and NEIGHBOUR in reason and "n1" in reason and "50%" in reason, reason
    assert "node ceiling run" in reason and not bool(two["accepted"]), reason
    assert not ev.failures, ev.failures


def test_a_ceiling_measured_beside_a_neighbour_makes_its_scale_inconclusive(cfg):
    """Only the ideal ran under the loop (it was pinned where the copies ran): the ideal is not the node's."""
    runs = [run(1, 166.0), run(2, 300.0), run(2, 200.0, (0.0, 0.4), INDEPENDENT)]
    ev, frame = judged(cfg, runs)
    assert frame.loc[2, "inconclusive_reason"].startswith("interference: node ceiling run"), frame.loc[2].to_dict()
    assert ev.verdict == "INCONCLUSIVE"


def test_foreign_work_under_the_share_is_judged_as_usual(cfg):
    """8.7% (a package install in the background) is under the default share: the scale is judged."""
    runs = [run(1, 166.0), run(2, 290.0, (0.087, 0.087)), run(2, 300.0, (0.087,), INDEPENDENT)]
    ev, frame = judged(cfg, runs)
    assert ev.verdict == "PASSED" and frame.loc[2, "inconclusive_reason"] == "", frame.loc[2].to_dict()


def test_a_users_max_foreign_share_is_the_share_above_which_it_applies(cfg):
    runs = [run(1, 166.0), run(2, 290.0, (0.2,)), run(2, 300.0, (), INDEPENDENT)]
    assert judged(cfg, runs)[0].verdict == "INCONCLUSIVE"  # the default 10%
    lenient = cfg.model_copy(update={"bounds": cfg.bounds.model_copy(update={"max_foreign_share": 0.25})})
    assert judged(lenient, runs)[0].verdict == "PASSED"


def test_a_baseline_under_interference_keeps_the_cause_first_on_the_scales_it_judges(cfg):
    runs = [run(1, 100.0, (0.3,)), run(2, 290.0), run(2, 300.0, (), INDEPENDENT)]
    _, frame = judged(cfg, runs)
    assert frame.loc[1, "inconclusive_reason"].startswith("interference:")
    assert frame.loc[2, "inconclusive_reason"].startswith("interference: baseline at 1 GPU(s)"), frame.loc[2].to_dict()


def test_the_re_measure_is_planned_once_and_judged_in_place_of_the_first_run(cfg):
    first = [run(1, 166.0), run(2, 128.0, (0.0, 0.5)), run(2, 170.0, (0.0, 0.5), INDEPENDENT)]
    plan = remeasure_plan(first, INTERFERENCE_SHARE)
    assert plan == [
        {"workload": "ssd", "gpus": 2, "variant": REMEASURE},
        {"workload": "ssd", "gpus": 2, "variant": REMEASURE_INDEPENDENT},
    ]
    again = [run(2, 280.0, (), REMEASURE), run(2, 300.0, (), REMEASURE_INDEPENDENT)]
    assert remeasure_plan(first + again, INTERFERENCE_SHARE) == []  # once: never a third run
    assert [r["variant"] for r in settled(first + again)] == ["", "", INDEPENDENT]
    ev, frame = judged(cfg, first + again)
    assert ev.verdict == "PASSED" and bool(frame.loc[2, "remeasured"]), frame.loc[2].to_dict()
    assert frame.loc[2, "throughput_img_s"] == pytest.approx(280.0)
    still = [run(2, 120.0, (0.0, 0.5), REMEASURE), run(2, 165.0, (0.0, 0.5), REMEASURE_INDEPENDENT)]
    ev, frame = judged(cfg, first + still)  # the neighbour stayed: inconclusive, naming it
    assert ev.verdict == "INCONCLUSIVE" and NEIGHBOUR in frame.loc[2, "inconclusive_reason"]
    assert frame.loc[2, "inconclusive_reason"].endswith("still there when measured again after the last scale")


def test_more_ranks_slower_than_fewer_never_passes_whatever_the_ideal(cfg):
    """No foreign work measured (a cause the suite cannot see): 2 ranks at 150 against one at 166, judged
    0.94 against a ceiling that fell with them. FAILED by its own expectation."""
    runs = [run(1, 166.0), run(2, 150.0), run(2, 160.0, (), INDEPENDENT)]
    ev, frame = judged(cfg, runs)
    assert ev.verdict == "FAILED" and frame.loc[2, "verdict"] == "fail"
    (failure,) = [f for f in ev.failures if f["expectation"] == names.THROUGHPUT_NOT_BELOW_SMALLER_SCALE]
    assert failure["gpus"] == 2 and "more ranks slower than fewer" in failure["reason"], failure
    assert frame.loc[2, "scaling_efficiency"] >= 0.7  # the ideal alone would have passed it


def test_a_suite_that_asks_for_no_scaling_verdict_gets_none_from_the_slower_than_smaller_rule(cfg):
    """min_scaling_efficiency 0 (a suite judging its wiring, not scaling, on a loaded box): not judged."""
    loose = cfg.model_copy(update={"bounds": cfg.bounds.model_copy(update={"min_scaling_efficiency": 0.0})})
    ev, _ = judged(loose, [run(1, 166.0), run(2, 150.0), run(2, 160.0, (), INDEPENDENT)])
    assert ev.verdict == "PASSED", ev.failures


def test_a_bound_miss_is_failed_only_when_its_second_run_misses_too(cfg):
    missed = [run(1, 166.0), run(2, 180.0), run(2, 300.0, (), INDEPENDENT)]  # 0.6 < 0.7
    ev, frame = judged(cfg, [*missed, run(2, 290.0, (), REPEAT)])
    assert ev.verdict == "PASSED", ev.failures  # the second run's 0.967 holds the bound
    assert frame.loc[2, "scaling_efficiency"] == pytest.approx(0.6)  # the first run's figure is still shown
    ev, _ = judged(cfg, [*missed, run(2, 186.0, (), REPEAT)])
    (failure,) = [f for f in ev.failures if f["expectation"] == names.SCALING_EFFICIENCY_AT_LEAST_BOUND]
    assert ev.verdict == "FAILED" and failure["confirmed_runs"] == 2, failure
    assert "both runs" in failure["reason"] and "0.600 then 0.620" in failure["reason"], failure
    ev, _ = judged(cfg, missed)
    (failure,) = [f for f in ev.failures if f["expectation"] == names.SCALING_EFFICIENCY_AT_LEAST_BOUND]
    assert failure["confirmed_runs"] == 1 and "one run" in failure["reason"], failure


def test_a_compute_bound_scale_is_not_judged_on_bandwidth_a_storage_bound_one_is():
    store = 2000.0
    cpu = {"avg_read_mb_s": 2.8, "data_wait_share": 0.02}
    base = {"avg_read_mb_s": 1.4, "data_wait_share": 0.01}
    assert idle_reason(cpu, base, store).startswith("not storage-bound: reads 2.8 MB/s")
    assert idle_reason(cpu, base, None) == ""  # nothing known of the store: judged as before
    near = {"avg_read_mb_s": FAR_BELOW * store, "data_wait_share": 0.02}
    assert idle_reason(near, base, store) == ""
    waiting = {"avg_read_mb_s": 2.8, "data_wait_share": 0.2}
    assert idle_reason(waiting, base, store) == ""


def test_the_scales_rank_figures_name_every_node_with_a_culprit(cfg):
    """Per node: a culprit on each of two hosts is named on each."""
    runs = [run(1, 166.0), run(2, 128.0, (0.3, 0.5)), run(2, 300.0, (), INDEPENDENT)]
    runs[1]["result"]["summary"]["per_rank"][1]["host"] = "n2"
    _, frame = judged(cfg, runs)
    reason = frame.loc[2, "inconclusive_reason"]
    assert "on n1" in reason and "on n2" in reason and "30%" in reason and "50%" in reason, reason
    assert json.loads(frame.loc[2, "ceiling_foreign_ranks"])[0]["foreign_cpu_share"] == 0.0
