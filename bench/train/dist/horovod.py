"""Horovod: Gloo on CPU nodes, NCCL on GPU nodes, chosen by what the node has."""

from __future__ import annotations

import os

import torch

from bench.train.dist.base import Dist, hostname, pick_device
from bench.train.dist.store import SECRET_ENV, horovod_url_addr


class HorovodDist(Dist):
    backend = "horovod"
    _gathers = 0

    @classmethod
    def start(cls) -> HorovodDist:
        import horovod.torch as hvd

        secret = os.environ.get(SECRET_ENV)
        addr = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")
        if secret and addr and "/" not in addr:  # every rendezvous URL carries the run's token
            port = os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]
            os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = horovod_url_addr(addr, port, secret)
        hvd.init()
        return cls(
            hvd.rank(), hvd.size(), hvd.local_rank(), hostname("HOROVOD_HOSTNAME"), pick_device(hvd.local_rank())
        )

    def _gather_equal(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        import horovod.torch as hvd

        self._gathers += 1
        return list(hvd.allgather(tensor.unsqueeze(0), name=f"allgather_json.{self._gathers}"))

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

    def transfer(self, buffer: torch.Tensor, src: int, dst: int) -> None:
        # Horovod has no send/recv: an alltoall in which only `src` sends, and only to `dst`
        import horovod.torch as hvd

        splits = torch.zeros(self.size, dtype=torch.int32)
        if self.rank == src:
            splits[dst] = buffer.numel()
            sent = buffer
        else:
            sent = buffer[:0]
        got, _ = hvd.alltoall(sent, splits=splits, name="ring")
        if self.rank == dst:
            buffer.copy_(got)

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        import horovod.torch as hvd

        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self._broadcast_optimizer_state(optimizer)
        return model, hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def _broadcast_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Rank 0's optimizer state on every rank, as `hvd.broadcast_optimizer_state` gives it, without
        its `broadcast_object` (which unpickles what rank 0 sends): tensors go by broadcast, the scalar
        options (learning rate, momentum, ...) as JSON through `broadcast_json`."""
        import horovod.torch as hvd

        # Called at wrap, on a fresh optimizer: every rank holds the same (empty) state, so the broadcast
        # names line up; an optimizer that had stepped on some ranks only would need Horovod's zero-grad
        # initialisation first.
        state = optimizer.state_dict()
        tensors = [
            (f"opt.{pid}.{name}", value)
            for pid, entry in sorted(state["state"].items())
            for name, value in sorted(entry.items())
            if torch.is_tensor(value)
        ]
        if tensors:
            hvd.broadcast_parameters(tensors, root_rank=0)
        options = [{k: v for k, v in group.items() if k != "params" and _plain(v)} for group in optimizer.param_groups]
        for group, chosen in zip(optimizer.param_groups, self.broadcast_json(options), strict=True):
            group.update({k: tuple(v) if isinstance(group.get(k), tuple) else v for k, v in chosen.items()})


def _plain(value) -> bool:
    """An option JSON carries as it is (numbers, flags, names, tuples of numbers such as Adam's betas)."""
    if isinstance(value, tuple | list):
        return all(isinstance(v, int | float) for v in value)
    return value is None or isinstance(value, bool | int | float | str)
