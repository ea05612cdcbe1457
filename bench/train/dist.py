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

    def barrier(self) -> None:
        import horovod.torch as hvd

        if self.size > 1:
            hvd.allreduce(torch.zeros(1), name="barrier", op=hvd.Sum)


def init() -> Dist:
    import os

    import horovod.torch as hvd

    hvd.init()
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, int(os.environ.get("SCALEWATCH_TORCH_THREADS", "1"))))
    host = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
    return Dist(hvd.rank(), hvd.size(), hvd.local_rank(), host, device)


def wrap_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    import horovod.torch as hvd

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    return hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
