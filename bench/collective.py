"""What the metrics and data sides need from the run a rank belongs to (`Collective`), defined low so
they never import the training side: bench.train.dist.Dist (Horovod, DDP) satisfies it as it is."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class Device(Protocol):
    """The device a rank computes on, as far as a summary names it (torch.device has it)."""

    @property
    def type(self) -> str: ...  # "cpu", "cuda"


@runtime_checkable
class Collective(Protocol):
    """One rank's place in its run and the JSON allgather every rank calls together
    (bench.metrics.summary reads the place; bench.data.pagecache gathers each node's status)."""

    @property
    def size(self) -> int: ...  # ranks in the run

    @property
    def local_rank(self) -> int: ...  # this rank's position on its node

    @property
    def backend(self) -> str: ...  # "horovod" or "ddp"

    @property
    def rendezvous(self) -> dict | None: ...  # where the ranks met: {host, port, interface}; None alone

    @property
    def device(self) -> Device: ...

    def allgather(self, obj: Any) -> list:
        """Every rank's `obj` (JSON-able), in rank order, as it reads after a JSON round trip."""
        ...
