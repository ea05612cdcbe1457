"""The process that owns a local or ssh run: rendezvous, ranks, failure propagation, state file.

Detached from whoever launched it, so an Airflow worker can defer and a restarted triggerer can
poll `state.json`. Any rank failing stops the others; SIGTERM cancels; the time limit times out.

Ranks start from `/` with `python -P` and the allow-listed environment (bench.launch.environment), and
a reason written to the state file is bounded printable text (bench.safe_fs.reason_text): it travels
into task logs, results rows and alert e-mails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.config.models import RunSpec
from bench.errors import LaunchError
from bench.launch.environment import SAFE_CWD, python_module, rank_environment
from bench.launch.lifetime import die_with_parent, send_line
from bench.launch.python import node_python
from bench.launch.rendezvous import start_rendezvous
from bench.launch.ssh_rendezvous import RemoteRendezvous, remote_command
from bench.launch.sshopts import SshOptions
from bench.launch.train_spec import spec_path, spec_sha256, write_train_spec
from bench.safe_fs import open_append, reason_text, write_file
from bench.train.dist.store import SECRET_ENV, new_secret

STATE = "state.json"
CANCEL_REQUEST = "cancel.request"  # written by a cancel from any process that sees the output folder
HEARTBEAT_S = 2.0
GRACE_S = 10


def rank_pattern(run_id: str, module: str = "rank") -> str:
    """An ERE matching exactly this run's rank wrappers (or its ssh rendezvous, module "rendezvous"):
    run S-ssd-1 must not match S-ssd-16."""
    literal = "".join(f"[{c}]" if c in ".+" else c for c in run_id)
    return rf"bench[.]launch[.]{module} --tag {literal}( |$)"


def write_state(out: Path, reason: str = "", **fields) -> None:
    """The state file pollers read (bench.launch.detached), its reason bounded printable text."""
    write_file(out / STATE, json.dumps({**fields, "reason": reason_text(reason), "updated": time.time()}))


def rank_argv(spec: RunSpec, python: str, wrapper_flags: list[str] | None = None) -> list[str]:
    """A rank wrapper's command: its own flags, then `bench train --spec` on the run's `train.json`
    (bench.launch.train_spec: the worker's TrainConfig as JSON, validated again by the same model)."""
    return [
        *python_module(python, "bench.launch.rank"),
        "--tag",
        spec.run_id,
        "--out",
        str(spec.output_dir),
        "--cpus-per-rank",
        str(spec.where.cpus_per_rank),
        *(["--oversubscribe"] if spec.where.oversubscribe else []),
        *(wrapper_flags or []),
        "--",
        "--spec",
        str(spec_path(spec)),
        "--spec-sha256",  # the rank refuses a train.json swapped after the launcher wrote it
        spec_sha256(spec),
    ]


class Supervisor:
    def __init__(self, spec: RunSpec, backend: str, ssh: SshOptions | None) -> None:
        self.spec, self.backend, self.ssh = spec, backend, ssh
        self.out = spec.output_dir
        self.procs: dict[int, subprocess.Popen] = {}
        self.hosts: dict[int, str] = {}
        self.cancelled = False
        self.rendezvous = None
        self.secret = new_secret()  # per run; reaches ranks through env or the ssh pipe, never argv

    def _hosts(self) -> list[tuple[str, int]]:
        if self.backend == "local":
            return [("localhost", self.spec.ranks)]
        return [(h.host, h.slots) for h in self.spec.where.hosts]

    def _start_rendezvous(self, backend: str):
        """Local: on this host, loopback only. ssh: on the first rank's host (bench.launch.ssh_rendezvous),
        and every other host must reach it before a rank starts."""
        if self.backend == "local":
            return start_rendezvous(backend, self._hosts(), self.spec.ranks, "127.0.0.1", self.secret)
        assert self.ssh is not None
        python = node_python(self.spec.python)
        log = self.out / "logs" / "rendezvous.log"
        rendezvous = RemoteRendezvous(self.ssh, self.spec, backend, self.secret, python, log)
        try:
            rendezvous.check_reachable(self.ssh, self.spec, python)
        except LaunchError:
            rendezvous.stop()
            raise
        return rendezvous

    def _start_rank(self, slot) -> subprocess.Popen:
        env = self.rendezvous.env(slot, self.rendezvous.listen_addr) | dict(self.spec.env)
        python = node_python(self.spec.python)
        backend = ["--backend", self.rendezvous.backend]
        argv = rank_argv(self.spec, python, backend)
        log = open_append(self.out / "logs" / f"rank{slot.rank}.log")
        if self.backend == "local":
            return subprocess.Popen(
                argv,
                env=rank_environment(env, {SECRET_ENV: self.secret}),
                cwd=SAFE_CWD,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        assert self.ssh is not None
        argv = rank_argv(self.spec, python, ["--stdin-lifeline", "--secret-from-stdin", *backend])
        host = next(h for h in self.spec.where.hosts if h.host == slot.hostname)
        # stdin carries the secret's one line, then nothing: when this supervisor dies, it closes, ssh
        # sends EOF, and the remote rank wrapper (--stdin-lifeline) stops its training process.
        proc = subprocess.Popen(
            self.ssh.argv(host, remote_command(env, argv)),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        send_line(proc, self.secret)
        return proc

    def _stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        if self.backend == "ssh" and self.ssh is not None:
            for host in self.spec.where.hosts:  # the remote side outlives a killed ssh client: end it there
                patterns = [rank_pattern(self.spec.run_id, m) for m in ("rank", "rendezvous")]
                command = " ; ".join(f"pkill -TERM -f -- {shlex.quote(p)}" for p in patterns) + " ; true"
                subprocess.run(
                    self.ssh.argv(host, command),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=30,
                    check=False,
                )
        deadline = time.monotonic() + GRACE_S
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def run(self) -> int:
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, self._on_term)
        from bench.train.dist import resolve

        # `auto` is decided once, here, for every rank: ranks that chose apart would never meet.
        backend = resolve(self.spec.train.backend)
        try:
            write_train_spec(self.spec)
            self.rendezvous = rendezvous = self._start_rendezvous(backend)
        except (LaunchError, OSError) as error:  # nothing started: the run fails naming the host, before any rank
            write_state(self.out, state="FAILED", pid=os.getpid(), reason=str(error), exit_codes={}, hosts={})
            return 1
        deadline = time.monotonic() + self.spec.where.time_limit_s
        state, reason = "RUNNING", ""
        write_state(self.out, state=state, pid=os.getpid(), reason="")
        beat = time.monotonic()
        try:
            for slot in rendezvous.plan:
                self.procs[slot.rank] = self._start_rank(slot)
                self.hosts[slot.rank] = slot.hostname
            while True:
                codes = {r: p.poll() for r, p in self.procs.items()}
                failed = {r: c for r, c in codes.items() if c not in (None, 0)}
                if (self.out / CANCEL_REQUEST).exists():
                    self.cancelled = True
                if time.monotonic() - beat >= HEARTBEAT_S:  # pollers elsewhere read liveness from this
                    write_state(self.out, state="RUNNING", pid=os.getpid(), reason="")
                    beat = time.monotonic()
                if self.cancelled:
                    state, reason = "CANCELLED", "cancelled on request"
                    break
                if failed:
                    rank = min(failed)
                    state = "FAILED"
                    reason = f"rank {rank} on {self.hosts[rank]} exited with code {failed[rank]}"
                    break
                if all(c == 0 for c in codes.values()):
                    state = "COMPLETED"
                    break
                if time.monotonic() > deadline:
                    state, reason = "TIMEOUT", f"time limit {self.spec.where.time_limit_s}s reached"
                    break
                time.sleep(0.2)
        finally:
            self._stop_all()
            rendezvous.stop()
            exit_codes = {r: p.returncode for r, p in self.procs.items()}
            write_state(self.out, state=state, pid=os.getpid(), reason=reason, exit_codes=exit_codes, hosts=self.hosts)
        return 0 if state == "COMPLETED" else 1

    def _on_term(self, *_args) -> None:
        self.cancelled = True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.launch.supervisor")
    # the spec record's path names the run (a process is matched to its run by it); the spec is stdin
    p.add_argument("--spec", required=True, type=Path)
    p.add_argument("--backend", choices=("local", "ssh"), required=True)
    args = p.parse_args(argv)
    doc = json.loads(sys.stdin.read())  # never the file: it lies in a folder others may write
    spec = RunSpec.model_validate(doc["spec"])
    ssh = SshOptions.model_validate(doc["ssh"]) if doc.get("ssh") else None
    return Supervisor(spec, args.backend, ssh).run()


if __name__ == "__main__":
    sys.exit(main())
