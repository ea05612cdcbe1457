"""What every distributed backend gives a rank: its place, the collectives the loop needs, a wrapped model.

The loop times one step the same way on every backend: forward + backward is compute (gradient
allreduces start during backward and overlap it), `optimizer.synchronize()` is the exposed part of
those allreduces (the wait after backward ends), `optimizer.step()` runs under `skip_synchronize()`.
So the breakdown and the bottleneck rules mean the same on Horovod and on DDP.
"""

from __future__ import annotations

import json
import os
import socket
from abc import ABC, abstractmethod
from dataclasses import asdict

import torch

from bench.errors import RunFailed
from bench.slots import Peer, contention
from bench.train.slots import auto_slot, bind_all_threads, planned_slot, recorded_slot, usable_cpus

MAX_EXCHANGE_BYTES = 64 << 20  # a rank's end-of-run report is tens of kilobytes


class Dist(ABC):
    backend: str = ""

    def __init__(self, rank: int, size: int, local_rank: int, host: str, device: torch.device) -> None:
        self.rank, self.size, self.local_rank, self.host, self.device = rank, size, local_rank, host, device
        self.slot: dict = recorded_slot()
        self.rendezvous = rendezvous_record()

    @abstractmethod
    def _gather_equal(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's 1-D `tensor` (all of one length and dtype), in rank order."""

    def allgather(self, obj) -> list:
        """Every rank's `obj` (JSON-able), in rank order, as it reads after a JSON round trip.

        JSON bytes in a tensor, never pickle: unpickling what a peer sends runs whatever code the peer
        chose (torch's all_gather_object and Horovod's allgather_object both unpickle). Tuples come
        back as lists and dict keys as strings, on one rank as on many."""
        payload = json.dumps(obj).encode()
        if len(payload) > MAX_EXCHANGE_BYTES:
            raise RunFailed(f"exchange: {len(payload)} bytes is over the {MAX_EXCHANGE_BYTES}-byte limit")
        if self.size == 1:
            return [json.loads(payload)]
        lengths = [
            int(t[0]) for t in self._gather_equal(torch.tensor([len(payload)], dtype=torch.int64, device=self.device))
        ]
        if max(lengths) > MAX_EXCHANGE_BYTES or min(lengths) < 0:
            raise RunFailed(f"exchange: a peer announced {lengths} bytes, outside 0..{MAX_EXCHANGE_BYTES}")
        buffer = torch.zeros(max(lengths), dtype=torch.uint8)
        buffer[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        parts = self._gather_equal(buffer.to(self.device))
        return [
            _from_json(rank, part[:n].cpu().numpy().tobytes())
            for rank, (part, n) in enumerate(zip(parts, lengths, strict=True))
        ]

    def broadcast_json(self, obj):
        """Rank 0's `obj` on every rank (JSON, as `allgather`)."""
        return self.allgather(obj if self.rank == 0 else None)[0]

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
        (the network probe, bench.train.dist.allreduce_probe)."""

    @abstractmethod
    def transfer(self, buffer: torch.Tensor, src: int, dst: int) -> None:
        """Move `buffer` from rank `src` into rank `dst`'s `buffer` (same size on both); every rank calls
        it, the others take no part or an empty one (the ring test, bench.train.dist.ring)."""

    @abstractmethod
    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """(module to train, optimizer): parameters broadcast from rank 0; the optimizer has
        `synchronize()` (wait for the gradient allreduces: the exposed communication) and
        `skip_synchronize()` (a context in which `step()` does not wait again)."""

    def close(self) -> None:  # noqa: B027 - optional hook: a backend with nothing to tear down keeps it
        """Leave the run once its last collective is done."""

    def settle_slot(self, bind: str) -> None:
        """Exchange host, cores, threads and GPU; with bind="auto", unpinned ranks of one host split
        its cores first. Records the result in `self.slot` (shared_with, oversubscribed, contention)."""
        planned = planned_slot()
        self._set_threads()
        peers = self._exchange_peers(planned)
        taken = None
        if bind == "auto" and planned is None:
            me = peers[self.rank]
            cpus = auto_slot(me, peers)
            if cpus != me.cpus:
                bind_all_threads(cpus)
                taken = list(cpus)
                self._set_threads()
                peers = self._exchange_peers(planned)
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

    def _exchange_peers(self, planned: dict | None) -> list[Peer]:
        return [Peer.from_dict(p) for p in self.allgather(asdict(self._peer(planned)))]

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


def _from_json(rank: int, data: bytes):
    try:
        return json.loads(data.decode())
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError, JSONDecodeError, nesting too deep
        raise RunFailed(f"exchange: rank {rank} sent {len(data)} bytes that are not JSON ({error})") from None


def rendezvous_record() -> dict | None:
    """Where this run's ranks met, for the summary: {host, port, interface}, or None (one rank alone)."""
    e = os.environ
    if e.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"):
        host = e["HOROVOD_GLOO_RENDEZVOUS_ADDR"].split("/")[0].rsplit(":", 1)[0]  # without the run's token
        port, iface = e.get("HOROVOD_GLOO_RENDEZVOUS_PORT"), e.get("HOROVOD_GLOO_IFACE")
    elif e.get("MASTER_ADDR") and e.get("WORLD_SIZE", "1") != "1":
        host, port, iface = e["MASTER_ADDR"], e.get("MASTER_PORT"), e.get("GLOO_SOCKET_IFNAME")
    else:
        return None
    return {"host": host, "port": int(port) if port else None, "interface": iface}


def hostname(*env_keys: str) -> str:
    for key in env_keys:
        if os.environ.get(key):
            return os.environ[key]
    return socket.gethostname()
