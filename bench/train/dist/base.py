"""What every distributed backend gives a rank: its place, the collectives the loop needs, a wrapped model.

The loop times one step the same way on every backend: forward + backward is compute (gradient
allreduces start during backward and overlap it), `optimizer.synchronize()` is the exposed part of
those allreduces (the wait after backward ends), `optimizer.step()` runs under `skip_synchronize()`.
So the breakdown and the bottleneck rules mean the same on Horovod and on DDP.
"""

from __future__ import annotations

import os
import socket
from abc import ABC, abstractmethod

import torch

from bench.train.slots import (
    Peer,
    auto_slot,
    bind_all_threads,
    contention,
    planned_slot,
    recorded_slot,
    usable_cpus,
)


class Dist(ABC):
    backend: str = ""

    def __init__(self, rank: int, size: int, local_rank: int, host: str, device: torch.device) -> None:
        self.rank, self.size, self.local_rank, self.host, self.device = rank, size, local_rank, host, device
        self.slot: dict = recorded_slot()

    @abstractmethod
    def allgather(self, obj) -> list:
        """Every rank's `obj`, in rank order."""

    @abstractmethod
    def agree_max(self, value: float) -> float:
        """The largest of every rank's `value`: ranks decide together, so their collectives stay aligned."""

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def bucket_bytes(self) -> tuple[int, int]:
        """(first bucket, later buckets) in bytes: how this backend cuts a step's gradients."""

    @abstractmethod
    def allreduce_buckets(self, buffers: list[torch.Tensor]) -> None:
        """Sum-allreduce every buffer, all in flight at once as a step's buckets are, and wait for them
        (the network probe, bench.train.dist.probe)."""

    @abstractmethod
    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """(module to train, optimizer): parameters broadcast from rank 0; the optimizer has
        `synchronize()` (wait for the gradient allreduces: the exposed communication) and
        `skip_synchronize()` (a context in which `step()` does not wait again)."""

    def close(self) -> None:
        """Leave the run once its last collective is done (a backend with nothing to tear down keeps this)."""

    def settle_slot(self, bind: str) -> None:
        """Exchange host, cores, threads and GPU; with bind="auto", unpinned ranks of one host split
        its cores first. Records the result in `self.slot` (shared_with, oversubscribed, contention)."""
        planned = planned_slot()
        self._set_threads()
        peers = self.allgather(self._peer(planned))
        taken = None
        if bind == "auto" and planned is None:
            me = peers[self.rank]
            cpus = auto_slot(me, peers)
            if cpus != me.cpus:
                bind_all_threads(cpus)
                taken = list(cpus)
                self._set_threads()
                peers = self.allgather(self._peer(planned))
        mine = contention(peers)[self.rank]
        slot = recorded_slot()
        if taken is not None:
            slot["bound_by"] = "scalewatch"  # this rank set its own affinity (--bind auto)
        slot["bind"] = "auto" if taken is not None else ("launcher" if planned else "none")
        slot["oversubscribed"] = slot["oversubscribed"] or mine["oversubscribed"]
        slot["shared_with"] = mine["shared_with"]
        slot["contention"] = mine["contention"]
        slot["threads"] = torch.get_num_threads()
        self.slot = slot

    def _set_threads(self) -> None:
        # torch's own threads stay inside the slot: one per core of it (unless told otherwise)
        threads = int(os.environ.get("SCALEWATCH_TORCH_THREADS", "0")) or len(usable_cpus())
        torch.set_num_threads(max(1, threads))

    def _peer(self, planned: dict | None) -> Peer:
        gpu = None
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            gpu = str(getattr(props, "uuid", "") or f"index {self.device.index}")
        return Peer(
            rank=self.rank,
            host=self.host,
            cpus=tuple(usable_cpus()),
            threads=torch.get_num_threads(),
            gpu=gpu,
            planned=bool(planned and planned.get("oversubscribe")),
        )


def pick_device(local_rank: int) -> torch.device:
    """The rank's GPU (its slot's, else its local rank's), or the CPU on a node without one."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    slot = planned_slot() or {}
    index = slot["gpu"] if slot.get("gpu") is not None else local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def hostname(*env_keys: str) -> str:
    for key in env_keys:
        if os.environ.get(key):
            return os.environ[key]
    return socket.gethostname()
