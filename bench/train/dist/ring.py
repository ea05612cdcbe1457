"""Each node's own link: a short point-to-point ring test between the nodes of a scale, in the same run.

Why: the allreduce probe (bench.train.dist.allreduce_probe) times the whole fabric, and on a slow link every rank
waits alike, so no rank figure of the training points at the node. nccl-tests' `sendrecv_perf` sends
from each rank to its ring neighbour and reports `algbw` (bytes / time) and `busbw` (algbw x 1 for a
send/receive: every byte crosses one link once); run per pair, it finds the link that is slow. Here
the same is done per node, on the scale's own ranks, process group and backend (Gloo on CPU nodes,
NCCL on GPU nodes for DDP; Horovod's alltoall with one non-empty split), right after the measured steps:

- one rank per node takes part (the node's lowest rank): a node's link is what is measured, not the
  loopback between its own ranks;
- the nodes, in rank order, form a ring; each ordered pair of ring neighbours (forward and backward,
  so each node has up to two partners each way) moves one buffer alone, every other rank idle, so a
  transfer's time is the pair's link and nothing else. The time is taken where the bytes arrive (a
  send completes once its bytes are in a socket buffer, a receive only once they all arrived); the
  size grows from a small first transfer until a transfer lasts about its share of BUDGET_S.
- each transfer gives `algbw_mb_s` (= busbw for a send/receive) and `latency_us` (a 4-byte
  transfer's time, the median of a few, as nccl-tests' smallest sizes show it).

A node's figures (bench.metrics.summary.node_ring_figures): `ring_recv_algbw_mb_s`, the best rate at which
it received from one of its partners, and `ring_send_algbw_mb_s`, the best rate at which a partner
received from it. The best, because a transfer is as slow as its slower end: a node slow toward every
partner is slow itself, a node slow toward one partner only has a slow partner. With two nodes each
has one partner and a transfer's figure belongs to both ends: the figures are shown, not judged
(bench.analysis.verdict.nodes).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from bench.train.dist.base import Dist

# The test's own time, all transfers together (the measured ones; the sizing and latency ones are short).
BUDGET_S = 3.0
REPS = 3  # timed transfers per pair, the median taken
LATENCY_REPS = 5
SIZING_BYTES = 256 * 1024
MAX_BYTES = 64 * 1024 * 1024
MIN_TARGET_S = 0.05


def node_leaders(hosts: list[str]) -> list[int]:
    """The lowest rank of each host, in rank order (`hosts`: every rank's host, in rank order)."""
    seen: dict[str, int] = {}
    for rank, host in enumerate(hosts):
        seen.setdefault(host, rank)
    return sorted(seen.values())


def ring_pairs(leaders: list[int]) -> list[tuple[int, int]]:
    """(sender, receiver) for each ordered pair of ring neighbours among `leaders`, each pair once:
    two nodes give A->B and B->A; three or more give each node's next and previous neighbour."""
    k = len(leaders)
    if k < 2:
        return []
    pairs: list[tuple[int, int]] = []
    for i in range(k):
        for a, b in ((leaders[i], leaders[(i + 1) % k]), (leaders[(i + 1) % k], leaders[i])):
            if (a, b) not in pairs:
                pairs.append((a, b))
    return pairs


def _timed(dist: Dist, buffer: torch.Tensor, src: int, dst: int) -> float:
    """One transfer of `buffer` from `src` to `dst`, started together after a barrier; the receiver's
    time (0.0 on every other rank)."""
    dist.barrier()
    start = time.perf_counter()
    dist.transfer(buffer, src, dst)
    if dist.rank == dst and dist.device.type == "cuda":
        torch.cuda.synchronize(dist.device)
    return time.perf_counter() - start if dist.rank == dst else 0.0


def _sized(dist: Dist, src: int, dst: int, target: float) -> torch.Tensor:
    """A buffer whose transfer from `src` to `dst` lasts about `target` seconds (at most MAX_BYTES):
    grown from SIZING_BYTES by the measured rate until one transfer lasts half the target, so a
    backend's fixed cost per transfer (Horovod's negotiation) does not size it too small. Every rank
    learns each time (the receiver's), so all take the same steps."""
    nbytes = SIZING_BYTES
    while True:
        buffer = torch.ones(nbytes // 4, dtype=torch.float32, device=dist.device)
        seconds = dist.agree_max(_timed(dist, buffer, src, dst))
        if seconds >= target / 2 or nbytes >= MAX_BYTES:
            return buffer
        grow = min(16.0, max(2.0, target / max(seconds, 1e-6)))
        nbytes = int(min(MAX_BYTES, nbytes * grow)) // 4 * 4


def probe_ring(dist: Dist) -> list[dict] | None:
    """Every transfer of the ring test, on every rank alike: [{src_host, dst_host, bytes, seconds,
    algbw_mb_s, latency_us}]; None where the scale has fewer than two nodes. Every rank calls it (the
    transfers are collectives on Horovod; barriers and sizes are agreed on every backend)."""
    hosts = [str(h) for h in dist.allgather(dist.host)]
    pairs = ring_pairs(node_leaders(hosts))
    if not pairs:
        return None
    target = max(MIN_TARGET_S, BUDGET_S / (len(pairs) * REPS))
    tiny = torch.ones(1, dtype=torch.float32, device=dist.device)
    mine = []
    for src, dst in pairs:
        _timed(dist, tiny, src, dst)  # the pair's connection set up
        latency = statistics.median(_timed(dist, tiny, src, dst) for _ in range(LATENCY_REPS))
        buffer = _sized(dist, src, dst, target)
        seconds = statistics.median(_timed(dist, buffer, src, dst) for _ in range(REPS))
        if dist.rank == dst:
            sent = buffer.numel() * buffer.element_size()
            mine.append(
                {
                    "src_host": hosts[src],
                    "dst_host": hosts[dst],
                    "bytes": sent,
                    "seconds": round(seconds, 6),
                    "algbw_mb_s": round(sent / seconds / 1e6, 3) if seconds > 0 else None,
                    "latency_us": round(latency * 1e6, 1),
                }
            )
    return [t for part in dist.allgather(mine) for t in part]
