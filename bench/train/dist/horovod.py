"""Horovod: Gloo on CPU nodes, NCCL on GPU nodes, chosen by what the node has."""

from __future__ import annotations

import torch

from bench.train.dist.base import Dist, hostname, pick_device


class HorovodDist(Dist):
    backend = "horovod"

    @classmethod
    def start(cls) -> HorovodDist:
        import horovod.torch as hvd

        hvd.init()
        return cls(hvd.rank(), hvd.size(), hvd.local_rank(), hostname("HOROVOD_HOSTNAME"), pick_device(hvd.local_rank()))

    def allgather(self, obj) -> list:
        import horovod.torch as hvd

        return hvd.allgather_object(obj) if self.size > 1 else [obj]

    def agree_max(self, value: float) -> float:
        import horovod.torch as hvd

        if self.size == 1:
            return value
        return float(hvd.allreduce(torch.tensor([value], dtype=torch.float64), name="agree_max", op=hvd.Max)[0])

    def barrier(self) -> None:
        import horovod.torch as hvd

        if self.size > 1:
            hvd.allreduce(torch.zeros(1), name="barrier", op=hvd.Sum)

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        import horovod.torch as hvd

        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
