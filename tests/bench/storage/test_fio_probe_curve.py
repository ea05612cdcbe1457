"""The multi-node probe's curve as sizing, the knee and `bench project` read it: what the storage gives
n nodes, and whether the client or the store binds (measured curves: tests/dags/test_ssh_suite.py)."""

from __future__ import annotations

import pytest

from bench.analysis.cluster import Cluster
from bench.analysis.projection.model import Fabric
from bench.analysis.verdict.evaluate import sizing_ceiling
from bench.storage.fio_probe import aggregate_bound, nodes_for, storage_at
from bench.suite.node_probe import node_counts


def _probe(per_node: float, *aggregate: tuple[int, float]) -> dict:
    curve = [{"nodes": n, "mb_s": m, "min_node_mb_s": m / n} for n, m in aggregate]
    return {"ceiling_mb_s": per_node, "per_node_mb_s": per_node, "aggregate": curve,
            "bound": aggregate_bound(curve, per_node)}  # fmt: skip


def test_the_bound_is_store_when_more_nodes_stop_adding_reads_and_client_while_they_add():
    rising = _probe(3.0, (1, 3.0), (2, 5.8), (4, 11.0))
    stopped = _probe(3.0, (1, 3.0), (2, 5.9), (4, 6.1))
    assert rising["bound"] == "client" and stopped["bound"] == "store"
    assert _probe(3.0, (1, 3.0))["bound"] == "client"  # one node: no store limit seen
    # a scale on n nodes reads n x one node until the store's figure, then the store's
    assert storage_at(stopped, 1) == (3.0, "client") and storage_at(stopped, 8) == (6.1, "store")
    assert storage_at(rising, 8) == (11.0, "client")  # never credited beyond what was measured
    assert storage_at({"ceiling_mb_s": 4.0}, 3) == (4.0, "client")  # a probe from before the curve
    assert sizing_ceiling(stopped) == (6.1, 4, "store") and sizing_ceiling(None) == (None, None, None)


def test_nodes_of_a_scale_and_the_node_counts_probed():
    hosts = [("a", 1), ("b", 1), ("c", 2)]
    assert [nodes_for("ssh", hosts, None, g) for g in (1, 2, 3, 4)] == [1, 2, 3, 3]
    assert nodes_for("slurm", [], 4, 9) == 3 and nodes_for("local", hosts, None, 8) == 1
    assert node_counts(1) == [1] and node_counts(2) == [1, 2] and node_counts(6) == [1, 2, 4, 6]


def test_project_reads_n_nodes_of_one_node_under_the_store_and_says_which_binds():
    cluster = Cluster(
        name="c", nodes=8, gpus_per_node=4, intra_node_link="100Gbit", inter_node_link="10Gbit", latency="5us"
    )
    fabric = Fabric(cluster=cluster, storage_bytes_s=10e9, storage_per_node_bytes_s=2e9, storage_bound="store")
    assert fabric.storage_at(4) == (2e9, "client") and fabric.storage_at(32) == (10e9, "store")
    assert Fabric(storage_bytes_s=10e9, storage_per_node_bytes_s=2e9).storage_at(64)[0] == pytest.approx(10e9)


def test_a_level_read_to_its_one_second_cap_is_sustained_and_a_shorter_one_is_not():
    """fio ends a job capped at runtime=1 at 999 ms: that level is the second asked for (a default probe at
    probe_seconds 0.5 was called inconclusive for it); a sample that ran out sooner is still too short."""
    from bench.storage.fio_probe import too_short

    assert not too_short(0.999) and not too_short(0.985) and not too_short(3.0)
    assert too_short(0.97) and too_short(0.2)
