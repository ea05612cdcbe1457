"""An ssh run's rendezvous on its first rank's host, as torchrun's c10d and the Slurm batch script run it.

Why not on the launcher's host (the Airflow worker): compute nodes often cannot reach the worker, and
an address the worker picks is one of its own. The first rank's host listens on the address its
peers reach (or loopback when every rank is on it, or a named `rendezvous_interface`), reads the
run's secret from the ssh pipe and ends when that pipe closes. Before any rank starts, every other
host is asked to open a connection to it, so a host that cannot reach the first one is named up
front instead of after a collective's timeout.

Its log (`logs/rendezvous.log`, in a run folder others may write) is opened without following a link,
and read back for the failure's reason the same way (bench.safe_fs.read_tail): a link swapped in while
the rendezvous fails (to /proc/self/environ, to a worker's secret) is named, never read, and what is
read is bounded printable text.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import subprocess
import time
from pathlib import Path

from bench.config.models import HostSlots, RunSpec
from bench.errors import LaunchError
from bench.launch.environment import SAFE_CWD, python_module
from bench.launch.lifetime import die_with_parent, send_line
from bench.launch.rendezvous import rank_env, rank_plan
from bench.launch.sshopts import SshOptions
from bench.safe_fs import open_append, read_tail, reason_text

START_S = 60.0
REACH_S = 10
LOG_TAIL_BYTES = 4096  # the rendezvous's last words: its error line


def remote_command(env: dict[str, str], argv: list[str]) -> str:
    """`argv` run on a host by its login shell, with `env` (sshd passes none of ours), every word quoted."""
    assigned = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    return f"cd {SAFE_CWD} && exec env {assigned} {shlex.join(argv)}"


class RemoteRendezvous:
    """The rendezvous server of one ssh run, on the host of rank 0, for as long as this object lives."""

    def __init__(self, ssh: SshOptions, spec: RunSpec, backend: str, secret: str, python: str, log: Path) -> None:
        self.backend = backend
        hosts = [(h.host, h.slots) for h in spec.where.hosts]
        self.plan = rank_plan(backend, hosts, spec.ranks)
        self.host = next(h for h in spec.where.hosts if h.host == self.plan[0].hostname)
        argv = python_module(python, "bench.launch.rendezvous", "--tag", spec.run_id, "--stdio", json.dumps(hosts))
        argv += ["--ranks", str(spec.ranks), "--backend", backend, "--lifetime-s", str(spec.where.time_limit_s + 120)]
        argv += ["--interface", spec.where.rendezvous_interface] if spec.where.rendezvous_interface else []
        self._log = log
        with open_append(log) as err:
            self._proc = subprocess.Popen(
                ssh.argv(self.host, remote_command(dict(spec.env), argv)),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        send_line(self._proc, secret)
        line = self._first_line()
        try:
            addr, port = line.split()
            self.listen_addr, self.port = addr, int(port)
        except ValueError:
            self.stop()
            raise LaunchError(f"rendezvous on {self.host.host} did not start: {self._log_tail()}") from None

    def _first_line(self) -> str:
        assert self._proc.stdout is not None
        fd, data = self._proc.stdout.fileno(), b""
        deadline = time.monotonic() + START_S
        while b"\n" not in data and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 256) if ready else b""
            if ready and not chunk:
                break  # ssh or the server exited
            data += chunk
        return data.decode(errors="replace").strip()

    def _log_tail(self) -> str:
        """The log's last line, bounded: read from the file itself, never through a link swapped in at its name."""
        exited = f"ssh exited with code {self._proc.poll()}"
        try:
            text = read_tail(self._log.parent, self._log.name, LOG_TAIL_BYTES).decode(errors="replace")
        except OSError as error:  # RefusedFile (a link, a FIFO) too: named, never followed
            return f"{exited}; its log not read ({reason_text(error)})"
        lines = [x for x in text.splitlines() if x.strip()]
        return reason_text(lines[-1]) if lines else exited

    def env(self, slot, addr: str) -> dict[str, str]:
        return rank_env(self.backend, slot, addr, self.port)

    def check_reachable(self, ssh: SshOptions, spec: RunSpec, python: str) -> None:
        """Every other host of the plan opens a TCP connection to the rendezvous; the unreachable are named."""
        others = list(dict.fromkeys(s.hostname for s in self.plan if s.hostname != self.host.host))
        probe = f"import socket; socket.create_connection(({self.listen_addr!r}, {self.port}), {REACH_S}).close()"
        procs: dict[str, subprocess.Popen] = {}
        for name in others:
            host: HostSlots = next(h for h in spec.where.hosts if h.host == name)
            procs[name] = subprocess.Popen(
                ssh.argv(host, remote_command(dict(spec.env), [python, "-P", "-c", probe])),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        failed = []
        for name, proc in procs.items():
            try:
                _, err = proc.communicate(timeout=REACH_S + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                err = "timed out"
            if proc.returncode != 0:
                reason = (err or "").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
                failed.append(f"{name} ({reason_text(reason[0], 200)})")
        if failed:
            raise LaunchError(
                f"hosts cannot reach the rendezvous at {self.listen_addr}:{self.port} on {self.host.host}: "
                + "; ".join(failed)
            )

    def stop(self) -> None:
        """Close the pipe (the server's lifeline), then make sure the ssh client is gone."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
