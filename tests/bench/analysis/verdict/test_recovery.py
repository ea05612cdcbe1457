"""Verdict recoveries (bench.analysis.verdict.recovery) over stored rows as the results store keeps them:
the rules the DAG test (tests/dags/test_bandwidth_throttled_suite.py) reaches once, each on its own."""

from __future__ import annotations

import json

import pandas as pd

from bench.analysis.verdict.expectations import BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND as BANDWIDTH
from bench.analysis.verdict.expectations import SCALING_EFFICIENCY_AT_LEAST_BOUND as SCALING
from bench.analysis.verdict.recovery import verdict_recoveries

SERIES = {"cluster": "local", "workload": "held", "gpus": 2, "config_key": "k1"}


def row(run: int, verdict: str, failed: list[str], efficiency: float | None = 0.95) -> dict:
    return SERIES | {
        "suite_run_id": f"run{run}",
        "started_at": f"2026-12-0{run}T00:00:00",
        "verdict": verdict,
        "failed_expectations": json.dumps(failed),
        "bandwidth_efficiency": efficiency,
        "bandwidth_efficiency_checked": efficiency,
        "min_bandwidth_efficiency": 0.7,
    }


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def test_a_failed_expectation_passing_again_is_one_recovery_keyed_by_the_failing_run():
    failing = row(1, "fail", [BANDWIDTH], 0.6)
    (notice,) = verdict_recoveries(frame(failing), frame(row(2, "pass", [])), "run2")
    assert notice["kind"] == "recovered" and notice["metric"] == BANDWIDTH
    assert notice["changed_at"] == failing["started_at"] and notice["changed_in"] == "run1"
    assert notice["line"] == (
        f"held @ 2 GPUs, bandwidth_efficiency: recovered — 0.95 passes {BANDWIDTH} again (bound 0.7); "
        "it failed at 0.6 in run run1"
    )


def test_recording_the_run_again_lists_the_same_recovery():
    """The store holds this run's own rows on a second recording: they are not its previous run."""
    failing, passing = row(1, "fail", [BANDWIDTH], 0.6), row(2, "pass", [])
    first = verdict_recoveries(frame(failing), frame(passing), "run2")
    again = verdict_recoveries(frame(failing, passing), frame(passing), "run2")
    assert again == first and len(first) == 1


def test_no_recovery_after_a_pass_while_still_failing_or_unjudged():
    assert (
        verdict_recoveries(frame(row(1, "fail", [BANDWIDTH]), row(2, "pass", [])), frame(row(3, "pass", [])), "run3")
        == []
    )
    assert verdict_recoveries(frame(row(1, "fail", [BANDWIDTH])), frame(row(2, "fail", [BANDWIDTH])), "run2") == []
    # an inconclusive run judged nothing: it neither recovers nor stands between the failure and a pass
    assert verdict_recoveries(frame(row(1, "fail", [BANDWIDTH])), frame(row(2, "inconclusive", [])), "run2") == []
    later = verdict_recoveries(
        frame(row(1, "fail", [BANDWIDTH]), row(2, "inconclusive", [])), frame(row(3, "pass", [])), "run3"
    )
    assert [n["changed_in"] for n in later] == ["run1"]
    # a figure not judged this time (no valid bandwidth figure) is not a recovery
    unjudged = row(2, "pass", [], efficiency=None)
    assert verdict_recoveries(frame(row(1, "fail", [BANDWIDTH])), frame(unjudged), "run2") == []


def test_only_the_expectations_that_pass_now_recover():
    previous = frame(row(1, "fail", [SCALING, BANDWIDTH]))
    notices = verdict_recoveries(previous, frame(row(2, "fail", [SCALING])), "run2")
    assert [n["metric"] for n in notices] == [BANDWIDTH]
