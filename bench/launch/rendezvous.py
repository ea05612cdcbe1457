"""The ranks' rendezvous, run by us so every launcher (local, ssh, srun) rendezvouses alike.

Horovod: its Gloo RendezvousServer. horovodrun would also work over ssh, but it turns host-key
checking off and owns the process lifetimes; running its server and slot env ourselves keeps both in
our hands. torch DDP: a TCPStore hosted here, as torchrun's agent hosts it (the port is the kernel's
choice, so no rank has to guess a free port on a remote host), and torchrun's env contract.

Env contract of a rank (both backends): HOROVOD_HOSTNAME, HOROVOD_RANK, HOROVOD_SIZE,
HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE place it (the rank
wrapper plans its slot from them); Horovod adds HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT; DDP adds
MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and
TORCHELASTIC_USE_AGENT_STORE=True.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def host_plan(hosts: list[tuple[str, int]], num_proc: int):
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments

    # max_num_proc too: without it Horovod fills every slot of the hosts, more ranks than asked
    return get_host_assignments([HostInfo(h, s) for h, s in hosts], num_proc, num_proc)


@dataclass(frozen=True)
class Placement:
    """One rank's place, with the fields of Horovod's SlotInfo."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int
    node: int  # the host's index: torchrun's GROUP_RANK


def block_plan(hosts: list[tuple[str, int]], num_proc: int) -> list[Placement]:
    """Ranks fill each host's slots in order (Horovod's and srun's block distribution)."""
    from bench.errors import LaunchError

    capacity = sum(s for _, s in hosts)
    if num_proc > capacity:
        raise LaunchError(f"ranks: {num_proc} ranks for the {capacity} slot(s) of the hosts")
    counts: list[tuple[str, int]] = []
    left = num_proc
    for host, slots in hosts:
        if left > 0:
            counts.append((host, min(slots, left)))
            left -= min(slots, left)
    plan, rank = [], 0
    for node, (host, count) in enumerate(counts):
        for local in range(count):
            crossing = [i for i, (_, c) in enumerate(counts) if c > local]  # hosts with this local rank
            plan.append(Placement(host, rank, local, crossing.index(node), num_proc, count, len(crossing), node))
            rank += 1
    return plan


def placement_env(slot) -> dict[str, str]:
    return {
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
    }


def slot_env(slot, addr: str, port: int) -> dict[str, str]:
    return placement_env(slot) | {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
    }


def torch_env(
    rank: int, size: int, local_rank: int, local_size: int, node: int, addr: str, port: int
) -> dict[str, str]:
    """torchrun's env contract, pointing at a store an agent (we) hosts."""
    return {
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size),
        "GROUP_RANK": str(node),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }


class Rendezvous:
    """Horovod's Gloo rendezvous server for one run."""

    backend = "horovod"

    def __init__(self, hosts: list[tuple[str, int]], num_proc: int) -> None:
        from horovod.runner.http.http_server import RendezvousServer

        self.plan = host_plan(hosts, num_proc)
        self._server = RendezvousServer()
        self.port = self._server.start()
        self._server.init(self.plan)

    def env(self, slot, addr: str) -> dict[str, str]:
        return slot_env(slot, addr, self.port)

    def stop(self) -> None:
        self._server.stop()


class TorchRendezvous:
    """torch's TCPStore for one DDP run, hosted here as torchrun's agent hosts it."""

    backend = "ddp"

    def __init__(self, hosts: list[tuple[str, int]], num_proc: int) -> None:
        from datetime import timedelta

        from torch.distributed import TCPStore

        self.plan = block_plan(hosts, num_proc)
        # port 0: the kernel's choice; it listens on every address, so ranks on other hosts reach it
        self._store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=300))
        self.port = self._store.port

    def env(self, slot, addr: str) -> dict[str, str]:
        return placement_env(slot) | torch_env(
            slot.rank, slot.size, slot.local_rank, slot.local_size, slot.node, addr, self.port
        )

    def stop(self) -> None:
        self._store = None


def start_rendezvous(backend: str, hosts: list[tuple[str, int]], num_proc: int) -> Rendezvous | TorchRendezvous:
    return Rendezvous(hosts, num_proc) if backend == "horovod" else TorchRendezvous(hosts, num_proc)


def slurm_hosts() -> list[tuple[str, int]]:
    """Node names of this allocation with their task counts (block distribution, as srun uses)."""
    names = subprocess.run(
        ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    per_node = int(os.environ["SLURM_NTASKS"]) // len(names)
    return [(n, per_node) for n in names]


def node_addr(node: str) -> str:
    out = subprocess.run(["scontrol", "show", "node", node], check=True, capture_output=True, text=True).stdout
    for token in out.split():
        if token.startswith("NodeAddr="):
            return token.split("=", 1)[1]
    return node


def main(argv: list[str] | None = None) -> int:
    """Serve the rendezvous for a Slurm allocation until terminated; writes `ADDR PORT BACKEND` to a file.

    `--backend auto` is resolved here, on the allocation's first node, once for every rank."""
    from bench.train.dist import BACKENDS, resolve

    p = argparse.ArgumentParser(prog="python -m bench.launch.rendezvous")
    p.add_argument("--port-file", required=True, type=Path)
    p.add_argument("--addr")
    p.add_argument("--backend", choices=BACKENDS, default="horovod")
    args = p.parse_args(argv)
    hosts = slurm_hosts()
    backend = resolve(args.backend)
    server = start_rendezvous(backend, hosts, sum(s for _, s in hosts))
    addr = args.addr or node_addr(os.environ.get("SLURMD_NODENAME", hosts[0][0]))
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(f"{addr} {server.port} {backend}\n")
    os.replace(tmp, args.port_file)
    stop = []

    def on_signal(signum, _frame) -> None:
        # Only a list append here: scancel signals both the batch script (whose EXIT trap signals us)
        # and us, and a handler that takes a lock (Event.set) deadlocks when the second lands inside the first.
        stop.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    parent = os.getppid()
    # A batch script killed by Slurm (TIMEOUT, scancel) never runs its EXIT trap: outlive it by a second at most.
    while not stop and os.getppid() == parent:
        time.sleep(0.5)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
