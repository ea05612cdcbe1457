"""Horovod: Gloo on CPU nodes, NCCL on GPU nodes, chosen by what the node has."""

from __future__ import annotations

import os

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

    def bucket_bytes(self) -> tuple[int, int]:
        # Horovod fuses every ready tensor into one buffer of HOROVOD_FUSION_THRESHOLD (64 MiB by default)
        fusion = int(os.environ.get("HOROVOD_FUSION_THRESHOLD", 64 * 1024 * 1024))
        return fusion, fusion

    def allreduce_buckets(self, buffers: list[torch.Tensor]) -> None:
        import horovod.torch as hvd

        handles = [hvd.allreduce_async_(b, name=f"probe.{i}", op=hvd.Sum) for i, b in enumerate(buffers)]
        for handle in handles:
            hvd.synchronize(handle)

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        import horovod.torch as hvd

        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
