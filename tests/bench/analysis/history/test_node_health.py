"""A node slowest in several recent runs is named; one slow run, or a node slow on data, is not."""

from __future__ import annotations

import json

import pandas as pd

from bench.analysis.history.node_health import slow_nodes


def rank(host: str, rank_no: int, compute_rate: float, data_wait: float = 0.1) -> dict:
    measured, compute_share = 10.0, 0.8
    return {
        "rank": rank_no,
        "host": host,
        "images": compute_rate * measured * compute_share,
        "measured_s": measured,
        "compute_share": compute_share,
        "data_wait_share": data_wait,
        "images_per_s": compute_rate * compute_share,
    }


def run(i: int, slow: dict[str, float]) -> dict:
    hosts = ["gpu-01", "gpu-02", "gpu-07", "gpu-08"]
    ranks = [rank(h, k, 100.0 * (1 - slow.get(h, 0.0))) for k, h in enumerate(hosts)]
    return {
        "suite_run_id": f"run-{i:02d}",
        "started_at": f"2026-11-{i + 1:02d}T03:00:00",
        "cluster": "a",
        "workload": "ssd",
        "gpus": 4,
        "rank_breakdown": json.dumps(ranks),
    }


def test_a_node_behind_in_four_of_five_runs_is_named_with_its_range():
    gaps = [0.12, 0.15, 0.0, 0.18, 0.14]
    frame = pd.DataFrame([run(i, {"gpu-07": g}) for i, g in enumerate(gaps)])
    (named,) = slow_nodes(frame)
    assert named["host"] == "gpu-07" and named["slowest_in"] == 4 and named["runs"] == 5
    assert named["line"] == "gpu-07 slowest in 4 of the last 5 runs, 12-18% behind"


def test_one_bad_run_and_a_rotating_slowest_node_name_nobody():
    frame = pd.DataFrame(
        [run(0, {"gpu-07": 0.3}), run(1, {"gpu-01": 0.08}), run(2, {"gpu-02": 0.08}), run(3, {}), run(4, {})]
    )
    assert slow_nodes(frame) == []


def test_only_the_last_runs_count():
    old = [run(i, {"gpu-08": 0.2}) for i in range(5)]
    new = [run(i, {}) for i in range(5, 10)]
    assert slow_nodes(pd.DataFrame(old + new)) == []
    assert slow_nodes(pd.DataFrame(old))[0]["host"] == "gpu-08"


def test_single_node_rows_have_no_peer_to_compare():
    row = run(0, {"gpu-07": 0.5})
    row["rank_breakdown"] = json.dumps([r for r in json.loads(row["rank_breakdown"]) if r["host"] == "gpu-07"])
    assert slow_nodes(pd.DataFrame([row] * 5)) == []


def test_a_node_the_newest_run_named_is_listed_at_once_marked_as_one_run():
    """Issue 49 item 5: the single-run rule (slow_node) and the history agree; an older run's naming is
    not carried (only the newest run's)."""
    frame = pd.DataFrame([run(i, {}) | {"slow_node": ""} for i in range(4)])
    frame.loc[0, "slow_node"] = "gpu-01"  # an old run's: not listed
    assert slow_nodes(frame) == []
    frame.loc[3, "slow_node"] = "gpu-07"
    (named,) = slow_nodes(frame)
    assert named["host"] == "gpu-07" and (named["slowest_in"], named["runs"]) == (1, 1)
    assert named["line"] == "gpu-07 stood out against its peers in the latest run (ssd @ 4 GPUs) (one run)"
