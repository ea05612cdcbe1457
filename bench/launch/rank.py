"""Rank wrapper: sets the backend's slot env, runs `bench train` as a child, records its exit.

Every backend starts ranks through this, so per-rank exit codes land in the same place
(`ranks/rank<N>.json`) whether the rank ran locally, over ssh or under srun. The training process
starts from `/` with `python -P` (bench.launch.environment): never from a folder a planted `bench/`
package could be imported from.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.launch.environment import SAFE_CWD, python_module
from bench.launch.lifetime import die_with_parent, read_line, watch_stdin
from bench.launch.rendezvous import listen_addr_towards
from bench.safe_fs import read_bounded, write_file
from bench.train.dist.store import SECRET_ENV
from bench.train.slots import SLOT_ENV, SlotError, bind, plan_slot

RENDEZVOUS_FILE_BYTES = 4096  # "addr port backend secret": well under this


def read_rendezvous_file(path: Path) -> str:
    """The Slurm job's rendezvous file (address, port, backend and the job's secret), read without following
    a link at its name: a link planted in a shared run folder would point the ranks at someone else's
    rendezvous and secret."""
    path = path.absolute()
    try:
        return read_bounded(path.parent, path.name, RENDEZVOUS_FILE_BYTES).decode()
    except (OSError, UnicodeDecodeError) as error:  # RefusedFile (a link, not a regular file) is an OSError
        sys.exit(f"rank: rendezvous file {path}: {error}; refused")


def iface_towards(addr: str) -> str:
    """The local interface whose address routes to `addr`: Gloo must bind there."""
    import psutil

    local_ip = listen_addr_towards(addr)
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == local_ip for a in addrs):
            return name
    return "lo"


def slurm_slot_env() -> dict[str, str]:
    e = os.environ
    node = e.get("SLURMD_NODENAME", socket.gethostname())
    return {
        "HOROVOD_HOSTNAME": node,
        "HOROVOD_RANK": e["SLURM_PROCID"],
        "HOROVOD_SIZE": e["SLURM_NTASKS"],
        "HOROVOD_LOCAL_RANK": e["SLURM_LOCALID"],
        "HOROVOD_LOCAL_SIZE": str(int(e["SLURM_NTASKS"]) // int(e["SLURM_NNODES"])),
        "HOROVOD_CROSS_RANK": e["SLURM_NODEID"],
        "HOROVOD_CROSS_SIZE": e["SLURM_NNODES"],
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
    }


def slurm_torch_env(addr: str, port: int) -> dict[str, str]:
    from bench.launch.rendezvous import torch_env

    e = os.environ
    nodes = int(e["SLURM_NNODES"])
    return torch_env(
        int(e["SLURM_PROCID"]),
        int(e["SLURM_NTASKS"]),
        int(e["SLURM_LOCALID"]),
        int(e["SLURM_NTASKS"]) // nodes,
        int(e["SLURM_NODEID"]),
        addr,
        port,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.launch.rank")
    p.add_argument("--tag", required=True, help="run id; lets cleanup find this run's processes")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--slot-from", choices=("env", "slurm"), default="env")
    p.add_argument("--rendezvous-file", type=Path, help="file holding 'ADDR PORT [BACKEND]' (slurm)")
    p.add_argument("--backend", choices=("horovod", "ddp"), help="the backend the launcher resolved (env mode)")
    p.add_argument("--stdin-lifeline", action="store_true", help="stop training when stdin closes (ssh)")
    p.add_argument("--secret-from-stdin", action="store_true", help="the rendezvous secret is stdin's first line")
    p.add_argument("--cpus-per-rank", type=int, default=1, help="cores per rank on a node without GPUs")
    p.add_argument("--oversubscribe", action="store_true", help="let ranks share cores/GPUs (rows are marked)")
    p.add_argument("train_argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    env = dict(os.environ)
    backend = args.backend or "horovod"
    if args.secret_from_stdin:
        env[SECRET_ENV] = read_line(0)
    if args.slot_from == "slurm":
        env.update(slurm_slot_env())
        addr, port, *named = read_rendezvous_file(args.rendezvous_file).split()
        backend = named[0] if named else "horovod"
        if len(named) > 1:
            env[SECRET_ENV] = named[1]
        if backend == "ddp":
            env.update(slurm_torch_env(addr, int(port)))
        else:
            env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = addr, port
    if backend == "ddp":  # Gloo binds where the store is reached from, as Horovod's Gloo does
        env.setdefault("GLOO_SOCKET_IFNAME", iface_towards(env["MASTER_ADDR"]))
    else:
        env.setdefault("HOROVOD_GLOO_IFACE", iface_towards(env["HOROVOD_GLOO_RENDEZVOUS_ADDR"]))
    rank = env["HOROVOD_RANK"]
    train_argv = args.train_argv[1:] if args.train_argv[:1] == ["--"] else args.train_argv
    train_argv = [*train_argv, "--backend", backend]  # what the launcher resolved; the last flag wins
    log_dir = args.out / "ranks"
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        slot = plan_slot(
            env["HOROVOD_HOSTNAME"],
            int(env["HOROVOD_LOCAL_RANK"]),
            int(env["HOROVOD_LOCAL_SIZE"]),
            args.cpus_per_rank,
            args.oversubscribe,
            scheduler_bound=args.slot_from == "slurm",
        )
    except SlotError as error:
        print(f"rank {rank}: {error}", file=sys.stderr, flush=True)
        _record(log_dir, rank, env["HOROVOD_HOSTNAME"], 70, started, None, str(error))
        return 70
    bind(slot)  # before the child starts: it and all its threads inherit the affinity
    env[SLOT_ENV] = slot.to_env(args.oversubscribe)
    child = subprocess.Popen(
        python_module(sys.executable, "bench", "train", *train_argv),
        env=env,
        cwd=SAFE_CWD,
        stdin=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # a SIGKILLed wrapper takes its training process with it
    )
    forward = lambda signum, _frame: child.send_signal(signum)  # noqa: E731
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    if args.stdin_lifeline:
        watch_stdin(lambda: child.poll() is None and child.terminate())
    code = child.wait()
    _record(log_dir, rank, env["HOROVOD_HOSTNAME"], code, started, slot.as_dict())
    return code if code >= 0 else 128 - code


def _record(log_dir: Path, rank: str, host: str, code: int, started: float, slot: dict | None, error: str = "") -> None:
    record = {
        "rank": int(rank),
        "host": host,
        "exit_code": code,
        "signal": -code if code < 0 else None,
        "seconds": time.time() - started,
        "slot": slot,
        "error": error,
    }
    write_file(log_dir / f"rank{rank}.json", json.dumps(record))


if __name__ == "__main__":
    sys.exit(main())
