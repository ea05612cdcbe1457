"""Horovod's Gloo rendezvous, run by us so every backend (local, ssh, srun) rendezvouses alike.

horovodrun would also work over ssh, but it turns host-key checking off and owns the process
lifetimes; running its RendezvousServer and slot env ourselves keeps both in our hands.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def host_plan(hosts: list[tuple[str, int]], num_proc: int):
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments

    return get_host_assignments([HostInfo(h, s) for h, s in hosts], num_proc)


def slot_env(slot, addr: str, port: int) -> dict[str, str]:
    return {
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
    }


class Rendezvous:
    def __init__(self, hosts: list[tuple[str, int]], num_proc: int) -> None:
        from horovod.runner.http.http_server import RendezvousServer

        self.plan = host_plan(hosts, num_proc)
        self._server = RendezvousServer()
        self.port = self._server.start()
        self._server.init(self.plan)

    def stop(self) -> None:
        self._server.stop()


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
    """Serve the rendezvous for a Slurm allocation until terminated; writes `ADDR PORT` to a file."""
    p = argparse.ArgumentParser(prog="python -m bench.launch.rendezvous")
    p.add_argument("--port-file", required=True, type=Path)
    p.add_argument("--addr")
    args = p.parse_args(argv)
    hosts = slurm_hosts()
    server = Rendezvous(hosts, sum(s for _, s in hosts))
    addr = args.addr or node_addr(os.environ.get("SLURMD_NODENAME", hosts[0][0]))
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(f"{addr} {server.port}\n")
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
