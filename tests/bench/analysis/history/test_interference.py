"""Interference that persists is a node finding (issue 62, item 5): a node whose ranks lose their cores to the
same process in 3 of a cluster's last 5 runs is named with the process, its share and the runs; two runs,
a different process each run, or a share under the cause rules' threshold name nobody. Over a real results
store (SQLite), as the suite's outcome reads it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.analysis.history.interference import interference_node_lines, interfering_nodes, process_name
from bench.store.db import ResultsStore
from tests.infra.history_seed import seed_many

CLUSTER = "load-000"  # seed_many's first cluster
HOSTS = ("gpu-01", "gpu-02", "gpu-07", "gpu-08")


def ranks(week: int, noisy: dict[str, tuple[str, float]]) -> list[dict]:
    """Two ranks per host; on a noisy host, its second rank lost `share` to `process` (a new pid each run:
    the process was restarted, it is the same process by name)."""
    out = []
    for k in range(2 * len(HOSTS)):
        host = HOSTS[k // 2]
        process, share = noisy.get(host, (None, 0.0)) if k % 2 else (None, 0.0)
        top = f"{process} (pid {4000 + week}) on core {k % 4}" if process else None
        out.append({"rank": k, "host": host, "foreign_cpu_share": share if process else 0.0, "foreign_top": top})
    return out


def seeded(tmp_path, weeks: int, noisy: dict[int, dict[str, tuple[str, float]]]) -> ResultsStore:
    """`weeks` weekly suite runs of one cluster, every row measured clean; in the weeks of `noisy`, the
    ssd @ 8 GPUs row's ranks lost cores as given (per rank, and the row's worst rank as the store keeps it)."""
    store = ResultsStore(f"sqlite:///{tmp_path}/results.db")
    seed_many(store, 1, weeks, configs=1)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE results SET foreign_cpu_share = 0.0, rank_breakdown = ?", (json.dumps(ranks(0, {})),)
        )
        for week, hosts in noisy.items():
            per_rank = ranks(week, hosts)
            worst = max(per_rank, key=lambda r: r["foreign_cpu_share"])
            conn.exec_driver_sql(
                "UPDATE results SET rank_breakdown = ?, foreign_cpu_share = ?, foreign_top = ? "
                "WHERE suite_run_id = ? AND workload = 'ssd' AND gpus = 8",
                (
                    json.dumps(per_rank),
                    worst["foreign_cpu_share"],
                    f"rank {worst['rank']} on {worst['host']}: {worst['foreign_top']}",
                    f"scheduled__{CLUSTER}-cfg0-{week:03d}",
                ),
            )
    return store


def test_a_process_on_a_node_in_three_of_five_runs_is_named_with_its_share_and_runs(tmp_path):
    store = seeded(
        tmp_path, 5, {0: {"gpu-07": ("busy", 0.28)}, 2: {"gpu-07": ("busy", 0.30)}, 4: {"gpu-07": ("busy", 0.35)}}
    )
    (named,) = interference_node_lines(store, CLUSTER)
    assert (named["kind"], named["cluster"], named["host"], named["process"]) == (
        "interference",
        CLUSTER,
        "gpu-07",
        "busy",
    )
    assert named["share"] == pytest.approx(0.30) and (named["runs"], named["of"]) == (3, 5)  # the median run's share
    assert named["line"] == "node gpu-07: `busy` took 30% of the ranks' cores in 3 of the last 5 runs"
    assert interference_node_lines(store, "another-cluster") == []


def test_two_of_five_runs_name_nobody(tmp_path):
    store = seeded(tmp_path, 5, {1: {"gpu-07": ("busy", 0.30)}, 3: {"gpu-07": ("busy", 0.30)}})
    assert interference_node_lines(store, CLUSTER) == []


def test_a_different_process_each_run_names_nobody(tmp_path):
    store = seeded(tmp_path, 5, {w: {"gpu-07": (f"job-{w}", 0.30)} for w in range(5)})
    assert interference_node_lines(store, CLUSTER) == []


def test_a_share_under_the_cause_rules_threshold_names_nobody(tmp_path):
    store = seeded(tmp_path, 5, {w: {"gpu-07": ("kworker/1:0", 0.09)} for w in range(5)})
    assert interference_node_lines(store, CLUSTER) == []


def test_only_the_last_five_runs_count(tmp_path):
    store = seeded(tmp_path, 8, {w: {"gpu-07": ("busy", 0.30)} for w in (0, 1, 2, 6)})
    assert interference_node_lines(store, CLUSTER) == []


def test_every_node_is_read_from_its_ranks_and_the_worst_node_from_a_row_without_them():
    """A frame with per-rank figures names both noisy nodes; the overview's (each row's own columns only)
    names the node of the row's worst rank, as the row itself names it."""
    rows = []
    for w in range(3):
        per_rank = ranks(w, {"gpu-01": ("busy", 0.20), "gpu-08": ("agent (v2)", 0.40)})
        top = f"rank 7 on gpu-08: agent (v2) (pid {4000 + w}) on core 3"
        run = {"suite_run_id": f"r{w}", "started_at": f"2026-01-0{w + 1}", "cluster": "c"}
        rows.append(run | {"rank_breakdown": json.dumps(per_rank), "foreign_cpu_share": 0.40, "foreign_top": top})
    frame = pd.DataFrame(rows)
    assert [(n["host"], n["process"], n["runs"]) for n in interfering_nodes(frame)] == [
        ("gpu-08", "agent (v2)", 3),
        ("gpu-01", "busy", 3),
    ]
    rows_only = frame.drop(columns=["rank_breakdown"])
    assert [(n["host"], n["process"], n["of"]) for n in interfering_nodes(rows_only)] == [("gpu-08", "agent (v2)", 3)]


@pytest.mark.parametrize(
    "top, name",
    [
        ("busy.sh (pid 123) on core 1", "busy.sh"),
        ("busy.sh (pid 123) on core 1, 48% of it", "busy.sh"),  # a sample's, before the summary cut it
        ("my (odd) proc (pid 9) on core 2", "my (odd) proc"),
        ("unnamed", None),
        ("", None),
        (None, None),
    ],
)
def test_the_process_is_the_command_name_before_its_pid(top, name):
    assert process_name(top) == name
