"""torch DistributedDataParallel: Gloo on CPU nodes, NCCL on GPU nodes, torch's own env:// rendezvous.

The env contract is torchrun's: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (and
LOCAL_WORLD_SIZE). The suite's launchers host the run's store themselves, as torchrun's agent does,
and hand each rank its secret (SCALEWATCH_RENDEZVOUS_SECRET): the rank then meets the others through
bench.train.dist.store, which admits only holders of that secret. Started by torchrun without it,
the rank uses torchrun's own store (env://), as any torchrun job does.

Exposed communication: a communication hook starts each bucket's allreduce (async, on a copy of the
bucket) when backward fills the bucket and lets backward go on; `synchronize()` after backward waits
for those allreduces and writes the averaged gradients back into the buckets (the parameters'
.grad are views of them). The wait is what backward did not hide, timed exactly where Horovod's
`optimizer.synchronize()` is timed.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta

import torch
import torch.distributed as tdist

from bench.errors import ConfigError
from bench.train.dist.base import Dist, hostname, pick_device
from bench.train.dist.store import SECRET_ENV, connect
from bench.train.slots import SLOT_ENV

CONTRACT = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
# A peer that stops answering (a killed rank on a dead host) fails the collective after this long;
# a killed process on a live host closes its sockets and fails it at once.
TIMEOUT = timedelta(seconds=int(os.environ.get("SCALEWATCH_DDP_TIMEOUT_S", "300")))


def env_contract() -> dict[str, str] | None:
    """torchrun's variables, or None when none is set (a plain one-rank `bench train`)."""
    present = {k: os.environ[k] for k in CONTRACT if k in os.environ}
    if not present:
        return None
    missing = [k for k in CONTRACT if k not in present]
    if missing and present.get("WORLD_SIZE", "1") != "1":
        raise ConfigError(
            f"backend ddp: the torchrun env contract is incomplete, {', '.join(missing)} not set "
            f"(needs {', '.join(CONTRACT)})"
        )
    return present


class _Pending:
    """The allreduces backward started, not yet waited for."""

    def __init__(self, world: int, device: torch.device) -> None:
        self.world, self.device = world, device
        self.works: list[tuple[tdist.Work, torch.Tensor, torch.Tensor]] = []

    def wait(self) -> None:
        for work, reduced, bucket in self.works:
            work.wait()
            bucket.copy_(reduced)
        if self.works and self.device.type == "cuda":  # NCCL's wait only orders streams: wait for the GPU
            torch.cuda.current_stream(self.device).synchronize()
        self.works.clear()


def _start_allreduce(pending, bucket):  # no annotations: DDP checks them and this module's are strings
    """DDP comm hook (GradBucket -> Future[Tensor]): launch this bucket's averaging allreduce and
    return at once, so backward goes on."""
    buffer = bucket.buffer()
    reduced = buffer.div(pending.world)
    pending.works.append((tdist.all_reduce(reduced, async_op=True), reduced, buffer))
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future(
        devices=[pending.device] if pending.device.type == "cuda" else None
    )
    done.set_result(buffer)  # DDP leaves the bucket as it is; synchronize() writes the average in
    return done


def _synchronizing(optimizer: torch.optim.Optimizer, pending: _Pending) -> torch.optim.Optimizer:
    """The same optimizer, whose class gains Horovod's synchronize()/skip_synchronize() (a GradScaler
    still sees a plain optimizer of its own class)."""
    base = type(optimizer)

    class DistributedOptimizer(base):  # type: ignore[misc, valid-type]
        _skip_sync = False

        def synchronize(self) -> None:
            pending.wait()

        @contextlib.contextmanager
        def skip_synchronize(self):
            self._skip_sync = True
            try:
                yield
            finally:
                self._skip_sync = False

        def step(self, closure=None):
            if not self._skip_sync:
                pending.wait()
            return super().step(closure)

    DistributedOptimizer.__name__ = f"Distributed{base.__name__}"
    optimizer.__class__ = DistributedOptimizer
    return optimizer


def _buffers_once(ddp_class) -> dict[str, bool]:
    """As Horovod: buffers (batch-norm statistics) broadcast once at start, then stay per rank. torch 2.13
    names that `forward_sync_buffers=False` and deprecates `broadcast_buffers`; torch 2.11 (the CUDA
    image the GPU check ran on) knows only `broadcast_buffers=False`. Both sync at construction."""
    import inspect

    known = inspect.signature(ddp_class).parameters
    return {"forward_sync_buffers" if "forward_sync_buffers" in known else "broadcast_buffers": False}


class DdpDist(Dist):
    backend = "ddp"

    @classmethod
    def start(cls) -> DdpDist:
        contract = env_contract()
        rank = int((contract or {}).get("RANK", 0))
        size = int((contract or {}).get("WORLD_SIZE", 1))
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        device = pick_device(local_rank)
        kind = "nccl" if device.type == "cuda" else "gloo"
        if not tdist.is_initialized():
            if size == 1:  # one rank needs no network: a store in this process
                tdist.init_process_group(kind, store=tdist.HashStore(), rank=0, world_size=1, timeout=TIMEOUT)
            else:
                extra = {"device_id": device} if device.type == "cuda" else {}
                secret = os.environ.get(SECRET_ENV)
                if not secret and os.environ.get(SLOT_ENV):  # started by our rank wrapper: never unauthenticated
                    raise ConfigError(
                        f"backend ddp: {SECRET_ENV} is not set for a rank the suite's launcher started; "
                        "refusing torch's unauthenticated store"
                    )
                if secret:
                    assert contract is not None
                    extra |= {"store": connect(contract["MASTER_ADDR"], int(contract["MASTER_PORT"]), secret, TIMEOUT)}
                    extra |= {"rank": rank, "world_size": size}
                else:
                    extra |= {"init_method": "env://"}
                tdist.init_process_group(kind, timeout=TIMEOUT, **extra)
        return cls(rank, size, local_rank, hostname("SCALEWATCH_HOSTNAME", "HOROVOD_HOSTNAME"), device)

    def _tensor(self, value: float) -> torch.Tensor:
        return torch.tensor([value], dtype=torch.float64, device=self.device)

    def _gather_equal(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.empty_like(tensor) for _ in range(self.size)]
        tdist.all_gather(out, tensor)
        return out

    def agree_max(self, value: float) -> float:
        if self.size == 1:
            return value
        t = self._tensor(value)
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
        return float(t[0])

    def barrier(self) -> None:
        if self.size > 1:
            tdist.all_reduce(self._tensor(0.0))

    def bucket_bytes(self) -> tuple[int, int]:
        # DDP's defaults: a small first bucket (so the first allreduce starts early), then bucket_cap_mb=25
        return int(tdist._DEFAULT_FIRST_BUCKET_BYTES), 25 * 1024 * 1024

    def allreduce_buckets(self, buffers: list[torch.Tensor]) -> None:
        works = [tdist.all_reduce(b, async_op=True) for b in buffers]
        for work in works:
            work.wait()

    def transfer(self, buffer: torch.Tensor, src: int, dst: int) -> None:
        # point-to-point on the run's own process group (Gloo and NCCL both have send/recv)
        if self.rank == src:
            tdist.send(buffer, dst)
        elif self.rank == dst:
            tdist.recv(buffer, src)

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(
            model,
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
            gradient_as_bucket_view=True,  # .grad are views of the buckets synchronize() writes into
            **_buffers_once(DistributedDataParallel),
        )
        pending = _Pending(self.size, self.device)
        ddp.register_comm_hook(pending, _start_allreduce)
        return ddp, _synchronizing(optimizer, pending)

    def close(self) -> None:
        if tdist.is_initialized():
            tdist.destroy_process_group()
