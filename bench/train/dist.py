"""Horovod setup: Gloo on CPU nodes, NCCL on GPU nodes, chosen by what the node has."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dist:
    rank: int
    size: int
    local_rank: int
    host: str
    device: torch.device

    def allgather(self, obj):
        import horovod.torch as hvd

        return hvd.allgather_object(obj) if self.size > 1 else [obj]

    def agree_max(self, value: float) -> float:
        """The largest of every rank's `value`: ranks decide together, so their collectives stay aligned."""
        import horovod.torch as hvd

        if self.size == 1:
            return value
        return float(hvd.allreduce(torch.tensor([value], dtype=torch.float64), name="agree_max", op=hvd.Max)[0])

    def barrier(self) -> None:
        import horovod.torch as hvd

        if self.size > 1:
            hvd.allreduce(torch.zeros(1), name="barrier", op=hvd.Sum)


def init() -> Dist:
    import os

    import horovod.torch as hvd

    from bench.train.slots import recorded_slot

    hvd.init()
    slot = recorded_slot()
    # torch's own threads stay inside the slot: one per core of it (unless told otherwise)
    threads = int(os.environ.get("SCALEWATCH_TORCH_THREADS", "0")) or len(slot["cpus"])
    torch.set_num_threads(max(1, threads))
    if torch.cuda.is_available():
        index = slot["gpu"] if slot["gpu"] is not None else hvd.local_rank()
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    else:
        device = torch.device("cpu")
    host = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
    return Dist(hvd.rank(), hvd.size(), hvd.local_rank(), host, device)


def wrap_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    import horovod.torch as hvd

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    return hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
