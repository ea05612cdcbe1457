"""The gradient allreduce's cost on a link: nccl-tests' bandwidth term (busbw = algbw x 2(n-1)/n) and
the ring's or tree's latency term (docs/design.md, "Projection")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from bench.errors import ConfigError

Algorithm = Literal["ring", "tree", "auto"]
# Horovod's tensor fusion buffer (HOROVOD_FUSION_THRESHOLD default): gradients go out in buckets this big.
FUSION_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Link:
    """What one rank's allreduce gets: bus bandwidth (bytes/s), one hop's latency (s), and where it came from."""

    bus_bytes_s: float
    latency_s: float
    span: str  # "intra_node", "inter_node" or "flat" (one link for every scale)
    source: str


def check_ranks(ranks: int) -> None:
    if ranks < 1:
        raise ConfigError(f"gpus: {ranks} must be at least 1")


def bandwidth_term_s(nbytes: float, ranks: int, bus_bytes_s: float) -> float:
    """(S/B) x 2(n-1)/n: the time every allreduce algorithm needs at least to move S bytes (nccl-tests)."""
    check_ranks(ranks)
    return nbytes / bus_bytes_s * 2 * (ranks - 1) / ranks


def latency_term_s(ranks: int, latency_s: float, buckets: int, algorithm: Algorithm) -> float:
    """Hops per bucket times the latency: 2(n-1) for a ring, 2 ceil(log2 n) for a tree (auto: the fewer)."""
    check_ranks(ranks)
    ring = 2 * (ranks - 1)
    tree = 2 * math.ceil(math.log2(ranks)) if ranks > 1 else 0
    hops = {"ring": ring, "tree": tree, "auto": min(ring, tree)}[algorithm]
    return buckets * hops * latency_s


def ring_allreduce_s(nbytes: float, ranks: int, link: Link, buckets: int = 1) -> float:
    return latency_term_s(ranks, link.latency_s, buckets, "ring") + bandwidth_term_s(nbytes, ranks, link.bus_bytes_s)


def tree_allreduce_s(nbytes: float, ranks: int, link: Link, buckets: int = 1) -> float:
    return latency_term_s(ranks, link.latency_s, buckets, "tree") + bandwidth_term_s(nbytes, ranks, link.bus_bytes_s)


def allreduce_s(nbytes: float, ranks: int, link: Link, buckets: int, algorithm: Algorithm) -> tuple[float, str]:
    """Seconds per step and the algorithm used; `auto` takes the cheaper, as NCCL's tuner would (ties: ring)."""
    ring, tree = ring_allreduce_s(nbytes, ranks, link, buckets), tree_allreduce_s(nbytes, ranks, link, buckets)
    if algorithm == "ring" or (algorithm == "auto" and ring <= tree):
        return ring, "ring"
    return tree, "tree"


def bus_bandwidth(nbytes: float, ranks: int, seconds: float) -> float:
    """nccl-tests' busbw: algbw x 2(n-1)/n, what the link delivered whatever the rank count."""
    return nbytes / seconds * 2 * (ranks - 1) / ranks


def measured_link(
    nbytes: float, ranks: int, seconds: float, latency_s: float, buckets: int, algorithm: Algorithm
) -> Link:
    """The bus bandwidth an allreduce of `nbytes` over `ranks` taking `seconds` implies, its latency removed first
    (with latency 0 the busbw carries it, as nccl-tests' figure does for one message size)."""
    if ranks < 2:
        raise ConfigError(f"--allreduce-gpus: {ranks}: an allreduce needs at least 2 ranks to measure a link")
    moving = seconds - latency_term_s(ranks, latency_s, buckets, algorithm)
    if not moving > 0:
        raise ConfigError(
            f"--latency: {latency_s:g} s x {buckets} bucket(s) is all of the {seconds:g} s allreduce measured at "
            f"{ranks} ranks (allreduce_s): no time is left for the bytes"
        )
    return Link(bus_bandwidth(nbytes, ranks, moving), latency_s, "flat", f"measured at {ranks} ranks")
