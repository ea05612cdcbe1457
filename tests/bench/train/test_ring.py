"""The ring test (bench.train.dist.ring) on real Gloo ranks over loopback: one rank per node takes
part, each ordered pair of ring neighbours moves one buffer, and each node's figures come from the
transfers it received and gave (named as nccl-tests names them)."""

from __future__ import annotations

import os
import textwrap

import pytest

from bench.metrics.summary import node_ring_figures
from bench.train.dist.ring import node_leaders, ring_pairs
from tests.bench.train.test_ddp import free_port, torchrun_env

RING_SCRIPT = textwrap.dedent(
    """
    import json
    from bench.train.dist import init
    from bench.train.dist.ring import probe_ring
    dist = init("ddp", "none")
    print(json.dumps({"rank": dist.rank, "host": dist.host, "ring": probe_ring(dist)}))
    dist.close()
    """
)


def run_ranks(hosts: list[str]) -> list[dict]:
    """One DDP (Gloo) rank per entry of `hosts`, each told its host by SCALEWATCH_HOSTNAME."""
    import json
    import subprocess
    import sys

    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RING_SCRIPT],
            env=os.environ | torchrun_env(rank, port, len(hosts)) | {"SCALEWATCH_HOSTNAME": host},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, host in enumerate(hosts)
    ]
    done = [p.communicate(timeout=180) for p in procs]
    said = "\n".join(f"rank {i} (exit {procs[i].returncode}): {err[-2000:]}" for i, (_, err) in enumerate(done))
    assert all(p.returncode == 0 for p in procs), said
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in done]


def test_leaders_and_pairs_are_one_rank_per_node_and_each_neighbour_both_ways():
    assert node_leaders(["a", "a", "b", "c", "b"]) == [0, 2, 3]
    assert ring_pairs([0]) == []
    assert ring_pairs([0, 2]) == [(0, 2), (2, 0)]
    assert ring_pairs([0, 2, 3]) == [(0, 2), (2, 0), (2, 3), (3, 2), (3, 0), (0, 3)]


@pytest.mark.slow
def test_three_nodes_each_receive_from_and_send_to_both_neighbours_on_real_gloo_ranks():
    ranks = run_ranks(["n0", "n1", "n1", "n2"])  # n1 holds two ranks: only its first takes part
    rings = [r["ring"] for r in ranks]
    assert all(ring == rings[0] for ring in rings), rings  # every rank holds the whole test
    pairs = {(t["src_host"], t["dst_host"]) for t in rings[0]}
    assert pairs == {("n0", "n1"), ("n1", "n0"), ("n1", "n2"), ("n2", "n1"), ("n2", "n0"), ("n0", "n2")}
    assert all(t["bytes"] >= 256 * 1024 and t["algbw_mb_s"] > 0 and t["latency_us"] > 0 for t in rings[0])
    figures = node_ring_figures(rings[0], "n1")
    assert figures["ring_recv_algbw_mb_s"] == max(t["algbw_mb_s"] for t in rings[0] if t["dst_host"] == "n1")
    assert figures["ring_send_algbw_mb_s"] == max(t["algbw_mb_s"] for t in rings[0] if t["src_host"] == "n1")


@pytest.mark.slow
def test_one_node_has_no_ring_test():
    assert [r["ring"] for r in run_ranks(["n0", "n0"])] == [None, None]
    assert node_ring_figures(None, "n0") == {
        "ring_recv_algbw_mb_s": None,
        "ring_send_algbw_mb_s": None,
        "ring_latency_us": None,
    }
