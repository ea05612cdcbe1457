"""The ranks' rendezvous, run by us so every launcher (local, ssh, srun) rendezvouses alike.

Horovod: its Gloo RendezvousServer. horovodrun would also work over ssh, but it turns host-key
checking off and owns the process lifetimes; running its server and slot env ourselves keeps both in
our hands. torch DDP: a store hosted here (bench.train.dist.store), as torchrun's agent hosts its
TCPStore (the port is the kernel's choice, so no rank has to guess a free port on a remote host),
and torchrun's env contract.

Who may join: the server listens on one address (127.0.0.1 when every rank is local, else the
address the other hosts reach this one on) and admits only ranks holding the run's secret, a fresh
256-bit value per run handed to ranks outside their command lines (environment, the ssh pipe, a
0600 file). Nothing a peer sends is unpickled anywhere in a rank (bench.train.dist exchanges JSON).

Env contract of a rank (both backends): HOROVOD_HOSTNAME, HOROVOD_RANK, HOROVOD_SIZE,
HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE place it (the rank
wrapper plans its slot from them); Horovod adds HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT; DDP adds
MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK; both get
SCALEWATCH_RENDEZVOUS_SECRET from the rank wrapper (never on a command line).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.errors import LaunchError
from bench.train.dist.store import MAX_BYTES, MAX_KEY, MAX_KEYS, MAX_VALUE, StoreServer, horovod_token, new_secret


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
    }


# Horovod's server starts a thread per connection (its handler waits 3 s per read, not per request): past
# this many in flight a connection is closed at once, so a crowd of slow peers cannot exhaust the host.
MAX_HTTP_CONNECTIONS = 256


def _guarded_handler():
    """Horovod's rendezvous handler behind the run's token and bounded sizes. Every method but the three
    Horovod's client uses answers 403: the base class would serve HEAD from the server's working folder."""
    from horovod.runner.http.http_server import RendezvousHandler

    class GuardedHandler(RendezvousHandler):
        def _admitted(self) -> bool:
            prefix = self.server.scalewatch_prefix
            if not hmac.compare_digest(self.path[: len(prefix)].encode(), prefix.encode()):
                self.send_status_code(403)
                return False
            self.path = "/" + self.path[len(prefix) :]
            return True

        def do_GET(self):
            if self._admitted():
                super().do_GET()

        def do_DELETE(self):
            if self._admitted():
                super().do_DELETE()

        def do_PUT(self):
            if not self._admitted():
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                length = -1
            server = self.server
            with server.cache_lock:  # reserved under the lock: concurrent PUTs cannot pass the bound together
                fits = 0 <= length <= MAX_VALUE and len(self.path) <= MAX_KEY
                fits = fits and server.scalewatch_held + length <= MAX_BYTES and server.scalewatch_puts < MAX_KEYS
                if fits:
                    server.scalewatch_held += length
                    server.scalewatch_puts += 1
            if not fits:
                self.send_status_code(413)
                return
            super().do_PUT()

        def do_HEAD(self):
            self.send_status_code(403)

        do_POST = do_PATCH = do_OPTIONS = do_HEAD

    return GuardedHandler


def _guarded_server(listen_addr: str):
    """Horovod's threaded rendezvous server with a cap on connections in flight."""
    import threading

    from horovod.runner.http.http_server import RendezvousHTTPServer

    class GuardedServer(RendezvousHTTPServer):
        scalewatch_held = 0
        scalewatch_puts = 0
        _slots = threading.BoundedSemaphore(MAX_HTTP_CONNECTIONS)

        def process_request(self, request, client_address):
            if not self._slots.acquire(blocking=False):
                self.shutdown_request(request)
                return
            super().process_request(request, client_address)

        def process_request_thread(self, request, client_address):
            try:
                super().process_request_thread(request, client_address)
            finally:
                self._slots.release()

    return GuardedServer((listen_addr, 0), _guarded_handler(), 0)


class Rendezvous:
    """Horovod's Gloo rendezvous server for one run, on one address, behind the run's token."""

    backend = "horovod"

    def __init__(self, plan: list, listen_addr: str, secret: str) -> None:
        import threading

        self.plan = plan
        self.secret = secret
        try:
            self._httpd = _guarded_server(listen_addr)
        except OSError as error:
            raise LaunchError(f"rendezvous: cannot listen on {listen_addr}: {error}") from error
        self.listen_addr, self.port = self._httpd.server_address[:2]
        self._httpd.scalewatch_prefix = f"/{horovod_token(secret)}:{self.port}/"
        self._httpd.init(self.plan)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="rendezvous", daemon=True)
        self._thread.start()

    def env(self, slot, addr: str) -> dict[str, str]:
        return rank_env(self.backend, slot, addr, self.port)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class TorchRendezvous:
    """The DDP run's store (bench.train.dist.store), hosted here as torchrun's agent hosts its TCPStore."""

    backend = "ddp"

    def __init__(self, plan: list, listen_addr: str, secret: str) -> None:
        self.plan = plan
        self.secret = secret
        self._store = StoreServer(listen_addr, secret)
        self.listen_addr, self.port = self._store.addr, self._store.port

    def env(self, slot, addr: str) -> dict[str, str]:
        return rank_env(self.backend, slot, addr, self.port)

    def stop(self) -> None:
        self._store.stop()


def rank_plan(backend: str, hosts: list[tuple[str, int]], num_proc: int) -> list:
    """Every rank's place: Horovod's own planner for Horovod, the block plan for DDP. Deterministic, so
    a launcher and a rendezvous started on another host compute the same plan."""
    return host_plan(hosts, num_proc) if backend == "horovod" else block_plan(hosts, num_proc)


def rank_env(backend: str, slot, addr: str, port: int) -> dict[str, str]:
    """A rank's env for a rendezvous at addr:port (its secret travels apart, never in this env's argv)."""
    if backend == "horovod":
        return slot_env(slot, addr, port)
    place = (slot.rank, slot.size, slot.local_rank, slot.local_size, slot.node)
    return placement_env(slot) | torch_env(*place, addr, port)


def start_rendezvous(
    backend: str, hosts: list[tuple[str, int]], num_proc: int, listen_addr: str, secret: str | None = None
) -> Rendezvous | TorchRendezvous:
    """The run's rendezvous listening on `listen_addr` only (127.0.0.1 when every rank is local)."""
    kind = Rendezvous if backend == "horovod" else TorchRendezvous
    return kind(rank_plan(backend, hosts, num_proc), listen_addr, secret or new_secret())


def listen_addr_towards(host: str) -> str:
    """This host's address on the route to `host`: the one address remote ranks reach us on."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(host), 9))
            return s.getsockname()[0]
    except OSError as error:
        raise LaunchError(f"rendezvous: no route from this host to {host}: {error}") from error


def interface_addr(name: str) -> str:
    """The IPv4 address of this host's interface `name` (a multi-homed node's fabric, say)."""
    import psutil

    found = psutil.net_if_addrs()
    for addr in found.get(name, []):
        if addr.family == socket.AF_INET:
            return addr.address
    have = ", ".join(sorted(n for n, addrs in found.items() if any(a.family == socket.AF_INET for a in addrs)))
    raise LaunchError(
        f"rendezvous_interface: {name!r} has no IPv4 address on {socket.gethostname()} (its interfaces: {have})"
    )


def choose_listen_addr(plan: list, interface: str | None) -> str:
    """Where the first rank's host listens: loopback when every rank is on it; else the named
    interface's address, or the address on its route to the next host of the plan."""
    hosts = list(dict.fromkeys(slot.hostname for slot in plan))
    if len(hosts) == 1:
        return "127.0.0.1"
    if interface:
        return interface_addr(interface)
    return listen_addr_towards(hosts[1])


def serve_stdio(
    backend: str, hosts: list[tuple[str, int]], num_proc: int, interface: str | None, lifetime_s: int
) -> int:
    """The rendezvous of an ssh run, on its first rank's host: the secret is stdin's first line, the
    chosen `ADDR PORT` goes to stdout, and stdin closing (the launcher gone), SIGTERM, or the run's time
    limit passing ends it. The limit is for a launcher whose link vanished without a FIN: its ssh
    session, and so this pipe, would otherwise stay open for ever."""
    from bench.launch.lifetime import read_line

    secret = read_line(0)
    plan = rank_plan(backend, hosts, num_proc)
    try:
        server = start_rendezvous(backend, hosts, num_proc, choose_listen_addr(plan, interface), secret)
    except LaunchError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 70
    print(f"{server.listen_addr} {server.port}", flush=True)

    def on_term(_signum, _frame) -> None:
        raise SystemExit(0)  # out of the blocking read below (a flag alone would wait for stdin)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGALRM, on_term)
    signal.alarm(max(1, lifetime_s))
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    finally:
        server.stop()
    return 0


def slurm_hosts() -> list[tuple[str, int]]:
    """Node names of this allocation with their task counts (block distribution, as srun uses)."""
    names = _scontrol(["show", "hostnames", os.environ["SLURM_JOB_NODELIST"]]).split()
    per_node = int(os.environ["SLURM_NTASKS"]) // len(names)
    return [(n, per_node) for n in names]


def _scontrol(args: list[str]) -> str:
    """scontrol's output, run with the allow-listed environment from `/` (bench.launch.environment)."""
    from bench.launch.environment import SAFE_CWD, tool_environment

    return subprocess.run(
        ["scontrol", *args], check=True, capture_output=True, text=True, env=tool_environment(), cwd=SAFE_CWD
    ).stdout


def node_addr(node: str) -> str:
    out = _scontrol(["show", "node", node])
    for token in out.split():
        if token.startswith("NodeAddr="):
            return token.split("=", 1)[1]
    return node


def main(argv: list[str] | None = None) -> int:
    """Serve the rendezvous for a Slurm allocation until terminated; writes `ADDR PORT BACKEND` to a file.

    `--backend auto` is resolved here, on the allocation's first node, once for every rank."""
    from bench.train.dist import BACKENDS, resolve

    p = argparse.ArgumentParser(prog="python -m bench.launch.rendezvous")
    p.add_argument("--port-file", type=Path, help="Slurm: where to write 'ADDR PORT BACKEND SECRET' (0600)")
    p.add_argument("--addr", help="Slurm: the address to listen on (default: the first node's NodeAddr)")
    p.add_argument("--interface", help="listen on this interface's address (a multi-homed node)")
    p.add_argument("--backend", choices=BACKENDS, default="horovod")
    p.add_argument("--stdio", metavar="HOSTS_JSON", help="ssh: serve for [[host, slots], ...], secret on stdin")
    p.add_argument("--ranks", type=int)
    p.add_argument("--tag", help="the run id: lets the launcher's cleanup find this server")
    p.add_argument("--lifetime-s", type=int, default=24 * 3600, help="ssh: exit after this long regardless")
    args = p.parse_args(argv)
    if args.stdio:
        hosts = [(str(h), int(n)) for h, n in json.loads(args.stdio)]
        return serve_stdio(args.backend, hosts, args.ranks, args.interface, args.lifetime_s)
    if args.port_file is None:
        p.error("--port-file or --stdio is required")
    hosts = slurm_hosts()
    backend = resolve(args.backend)
    try:
        if args.addr:
            addr = args.addr
        elif args.interface:
            addr = interface_addr(args.interface)
        elif len(hosts) == 1:  # every rank on this node: nothing else needs to reach the rendezvous
            addr = "127.0.0.1"
        else:
            addr = node_addr(os.environ.get("SLURMD_NODENAME", hosts[0][0]))
    except LaunchError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 70
    secret = new_secret()
    server = start_rendezvous(backend, hosts, sum(s for _, s in hosts), addr, secret)
    write_private(args.port_file, f"{addr} {server.port} {backend} {secret}\n")
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
    write_private(args.port_file, f"{addr} {server.port} {backend}\n")  # the secret is spent: not kept
    return 0


def write_private(path: Path, text: str) -> None:
    """Write `text` readable by this user alone (the file carries the run's secret), replacing atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
