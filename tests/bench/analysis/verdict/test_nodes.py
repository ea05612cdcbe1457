"""The node rule (bench.analysis.verdict.nodes): one node that stands out against the median of its
peers is named, on the probe's level and on a scale; equal nodes name nobody; one node is no peer group."""

from __future__ import annotations

import json

import pandas as pd

from bench.analysis.verdict.nodes import (
    NODE_GAP,
    add_slow_nodes,
    missing_figures,
    missing_nodes,
    node_problems,
    node_warnings,
    probe_bound,
    probe_slow_nodes,
    scale_nodes,
    slow_node,
    stand_out,
)
from bench.metrics.summary import node_ring_figures
from bench.suite.node_probe import judge_level
from tests.bench.suite.test_probe_guards import LAUNCHED, SECONDS, share_doc


def _level(*mb_s: float) -> dict:
    """A level the probe judges (bench.suite.node_probe.judge_level) with these nodes' MB/s, read together."""
    docs = [share_doc(f"host{i}", mb_s=v, bytes=int(v * 1e6 * SECONDS)) for i, v in enumerate(mb_s)]
    received = [LAUNCHED + 1.0 + SECONDS + 0.2] * len(docs)
    return judge_level(len(docs), docs, LAUNCHED, received, SECONDS)


def test_the_issue_case_names_the_slow_node_and_the_bound_is_node():
    level = _level(5.74, 1.94)
    assert level["conclusive"]
    slow = probe_slow_nodes([level])
    assert slow == [{"host": "host1", "mb_s": 1.94, "peers_median_mb_s": 5.74}]
    assert probe_bound(slow, "store") == "node"
    # named as the suite names the node (its ssh host, as its ranks report it), not by its own hostname
    assert probe_slow_nodes([level], {"host0": "10.0.0.2", "host1": "10.0.0.3"})[0]["host"] == "10.0.0.3"


def test_equal_nodes_name_nobody_and_the_aggregate_rule_stands():
    assert probe_slow_nodes([_level(50.0, 49.0, 51.0, 50.5)]) == []
    assert probe_bound([], "store") == "store" and probe_bound([], "client") == "client"


def test_a_node_just_inside_the_gap_is_not_named_and_just_outside_is():
    inside = 100.0 * (1 - NODE_GAP) + 0.5
    outside = 100.0 * (1 - NODE_GAP) - 0.5
    assert stand_out({"a": 100.0, "b": 100.0, "c": inside}) == []
    assert [s["host"] for s in stand_out({"a": 100.0, "b": 100.0, "c": outside})] == ["c"]


def test_an_inconclusive_level_names_nobody():
    docs = [share_doc("host0", mb_s=5.0), share_doc("host1", mb_s=1.0, fresh=False)]
    level = judge_level(2, docs, LAUNCHED, [LAUNCHED + 1.0 + SECONDS + 0.2] * 2, SECONDS)
    assert not level["conclusive"]
    assert probe_slow_nodes([level]) == []


def _rank(rank: int, host: str, images: int, compute_s: float, comm: float = 0.2) -> dict:
    return {
        "rank": rank,
        "host": host,
        "images": images,
        "images_per_s": images / 10.0,
        "breakdown": {"compute_s": compute_s, "comm_share": comm, "data_wait_share": 0.1},
    }


def test_a_scale_names_the_node_whose_compute_rate_stands_out():
    ranks = [_rank(0, "a", 400, 4.0), _rank(1, "a", 400, 4.0), _rank(2, "b", 400, 4.1), _rank(3, "c", 400, 9.0)]
    nodes = scale_nodes(ranks)
    assert [n["host"] for n in nodes] == ["a", "b", "c"] and nodes[0]["img_s"] == 80.0
    host, evidence = slow_node(nodes)
    assert host == "c" and "computes" in evidence and "peers' median" in evidence


def test_a_scale_names_the_probes_slow_node_only_when_it_trains_there():
    nodes = scale_nodes([_rank(0, "a", 400, 4.0), _rank(1, "b", 400, 4.0)])
    slow = [{"host": "b", "mb_s": 1.94, "peers_median_mb_s": 5.74}]
    assert slow_node(nodes) == ("", "")
    host, evidence = slow_node(nodes, slow)
    assert host == "b" and "storage probe" in evidence
    assert slow_node(scale_nodes([_rank(0, "b", 400, 4.0)]), slow) == ("", "")  # one node: no peers


def test_a_host_without_figures_is_named():
    nodes = scale_nodes([_rank(0, "a", 400, 4.0)])
    assert missing_nodes(["a", "b"], nodes) == ["b"]


def _frame(*rows: dict) -> pd.DataFrame:
    base = {"workload": "ssd", "valid": True, "bottleneck": "communication", "bottleneck_evidence": "comm grew"}
    return pd.DataFrame([base | r for r in rows])


def test_a_node_without_the_figure_its_peers_have_makes_the_scale_inconclusive_naming_it():
    nodes = scale_nodes([_rank(0, "a", 400, 4.0), _rank(1, "b", 400, 4.0)], {"a": 5.0})
    frame = _frame({"gpus": 2, "node_figures": json.dumps(nodes)}, {"gpus": 1, "node_figures": "[]"})
    reasons = node_problems(frame, pd.Series(["", ""], index=frame.index))
    assert "node(s) b returned no MB/s figure" in reasons[0] and reasons[1] == ""
    both = scale_nodes([_rank(0, "a", 400, 4.0), _rank(1, "b", 400, 4.0)], {"a": 5.0, "b": 4.5})
    assert missing_figures(both) == ""


def test_a_failing_scale_gets_the_cause_node_and_a_passing_one_a_warning():
    nodes = json.dumps(scale_nodes([_rank(0, "a", 400, 4.0), _rank(1, "b", 400, 4.0)]))
    frame = _frame(
        {"gpus": 2, "verdict": "fail", "node_figures": nodes}, {"gpus": 4, "verdict": "pass", "node_figures": nodes}
    )
    slow = [{"host": "b", "mb_s": 1.94, "peers_median_mb_s": 5.74}]
    out = add_slow_nodes(frame, slow)
    assert list(out["slow_node"]) == ["b", "b"]
    assert (
        out.loc[0, "bottleneck"] == "node"
        and "rank rules read it as communication" in out.loc[0, "bottleneck_evidence"]
    )
    assert out.loc[1, "bottleneck"] == "communication"  # a passing scale keeps its note; the node is a warning
    warned = node_warnings(out, slow)
    assert [(w["gpus"], w["value"]) for w in warned] == [(4, "b")] and "storage probe" in warned[0]["reason"]
    assert list(add_slow_nodes(frame, None)["slow_node"]) == ["", ""]  # equal nodes, no probe: nobody
    noisy = add_slow_nodes(frame.assign(bottleneck="interference"), slow)
    assert noisy.loc[0, "bottleneck"] == "interference" and noisy.loc[0, "slow_node"] == "b"  # explained already


def test_a_nodes_read_rate_counts_only_where_the_scales_read_figure_is_valid():
    nodes = scale_nodes([_rank(0, "a", 400, 4.0), _rank(1, "b", 400, 4.0)], {"a": 6.0, "b": 2.0})
    assert slow_node(nodes, None, reads_valid=False) == ("", "")  # cache-served or too short: no read figure
    host, evidence = slow_node(nodes, None, reads_valid=True)
    assert host == "b" and "reads 2.00 MB/s" in evidence


def _ring(*transfers: tuple[str, str, float]) -> dict[str, dict]:
    """Each host's ring figures (bench.metrics.summary.node_ring_figures) from (src, dst, MB/s) transfers."""
    test = [
        {"src_host": s, "dst_host": d, "bytes": 1 << 20, "seconds": 1.0, "algbw_mb_s": mb_s, "latency_us": 150.0}
        for s, d, mb_s in transfers
    ]
    return {h: node_ring_figures(test, h) for h in {t[0] for t in transfers} | {t[1] for t in transfers}}


def test_a_failing_scale_of_three_nodes_names_the_node_whose_ring_link_is_a_third_of_its_peers():
    # c receives at 2 MB/s from both neighbours (its link held); a and b at 6 from each other: the
    # transfers into c are slow on the senders' side too, but a and b each have a fast partner
    rings = _ring(("a", "b", 6.0), ("b", "a", 6.0), ("b", "c", 2.0), ("c", "b", 6.0), ("c", "a", 6.0), ("a", "c", 2.0))
    ranks = [_rank(0, "a", 400, 4.0), _rank(1, "b", 400, 4.0), _rank(2, "c", 400, 4.0)]
    nodes = scale_nodes(ranks, {"a": 5.0, "b": 5.0, "c": 5.0}, rings)
    assert [n["ring_recv_algbw_mb_s"] for n in nodes] == [6.0, 6.0, 2.0]
    out = add_slow_nodes(_frame({"gpus": 3, "verdict": "fail", "node_figures": json.dumps(nodes)}))
    assert (out.loc[0, "slow_node"], out.loc[0, "bottleneck"]) == ("c", "node")
    evidence = out.loc[0, "bottleneck_evidence"]
    assert "node c receives 2.00 MB/s on the ring test" in evidence and "peers' median 6.00" in evidence, evidence
    # a node whose sends are held (what its partners receive from it) is named by its send figure
    rings = _ring(("a", "b", 6.0), ("b", "a", 6.0), ("b", "c", 6.0), ("c", "b", 2.0), ("c", "a", 2.0), ("a", "c", 6.0))
    nodes = scale_nodes(ranks, {"a": 5.0, "b": 5.0, "c": 5.0}, rings)
    out = add_slow_nodes(_frame({"gpus": 3, "verdict": "fail", "node_figures": json.dumps(nodes)}))
    assert out.loc[0, "slow_node"] == "c" and "node c sends 2.00 MB/s" in out.loc[0, "bottleneck_evidence"]


def test_equal_ring_links_name_nobody_and_two_nodes_are_not_judged_on_the_ring():
    ranks = [_rank(0, "a", 400, 4.0), _rank(1, "b", 400, 4.0), _rank(2, "c", 400, 4.0)]
    rings = _ring(("a", "b", 6.0), ("b", "a", 5.8), ("b", "c", 6.1), ("c", "b", 6.0), ("c", "a", 5.9), ("a", "c", 6.0))
    assert slow_node(scale_nodes(ranks, None, rings)) == ("", "")
    # two nodes: b receives at a third of a's rate, and a's sends read the same (one pair, both ends)
    pair = _ring(("a", "b", 2.0), ("b", "a", 6.0))
    nodes = scale_nodes(ranks[:2], None, pair)
    assert [(n["ring_recv_algbw_mb_s"], n["ring_send_algbw_mb_s"]) for n in nodes] == [(6.0, 2.0), (2.0, 6.0)]
    assert slow_node(nodes) == ("", "")
