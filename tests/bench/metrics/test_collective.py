"""`bench.collective.Collective`: what the metrics and data sides call on a run, which the training
side's Dist provides; the page cache's per-node status works on any implementation of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bench.collective import Collective
from bench.data.pagecache import drop_page_cache, warm_page_cache
from bench.train.dist.base import Dist


class OneRank(Dist):
    """A Dist without a backend: the abstract collectives are never called by a lone rank's allgather."""

    backend = "none"

    def _gather_equal(self, tensor):
        raise AssertionError("one rank gathers without a collective")

    def agree_max(self, value):
        return value

    def barrier(self):
        pass

    def bucket_bytes(self):
        return (0, 0)

    def allreduce_buckets(self, buffers):
        pass

    def transfer(self, buffer, src, dst):
        pass

    def wrap(self, model, optimizer):
        return model, optimizer


@dataclass
class Node:
    """A rank whose peers report `peers` (their statuses) at every allgather."""

    local_rank: int = 0
    peers: list = field(default_factory=list)
    size: int = 1
    backend: str = "ddp"
    rendezvous: dict | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    calls: list = field(default_factory=list)

    def allgather(self, obj) -> list:
        self.calls.append(obj)
        return [obj, *self.peers]


def test_the_training_side_dist_is_a_collective():
    dist = OneRank(rank=0, size=1, local_rank=0, host="h", device=torch.device("cpu"))
    assert isinstance(dist, Collective)
    assert dist.allgather({"a": (1, 2)}) == [{"a": [1, 2]}]  # JSON round trip, as on many ranks


def test_the_worst_node_status_wins_and_only_a_node_first_rank_acts(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"x" * 8192)
    second = Node(local_rank=1, peers=["not_permitted"])  # not its node's first rank: it only gathers
    assert isinstance(second, Collective)
    assert drop_page_cache(second, tmp_path) == "not_permitted"
    assert second.calls == ["ready", "done"]
    assert warm_page_cache(Node(local_rank=1, peers=["warmed", "incomplete"]), tmp_path) == "incomplete"
    assert warm_page_cache(Node(peers=["warmed"]), tmp_path) == "warmed"  # read once, all of it resident
    assert drop_page_cache(Node(local_rank=0), None) == "done"  # no dataset: nothing to evict
