"""Local and ssh backends: both hand the run to a detached supervisor and poll its state file."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.config import RunSpec
from bench.launch.base import Handle, RunState
from bench.launch.sshopts import SshOptions
from bench.launch.supervisor import STATE

SPEC = "spec.json"


class DetachedLauncher:
    name = "local"

    def __init__(self, ssh: SshOptions | None = None) -> None:
        self.ssh = ssh

    def check(self, spec: RunSpec) -> None:
        return None

    def submit(self, spec: RunSpec) -> Handle:
        self.check(spec)
        out = spec.output_dir
        out.mkdir(parents=True, exist_ok=True)
        (out / STATE).unlink(missing_ok=True)
        spec_file = out / SPEC
        spec_file.write_text(
            json.dumps(
                {
                    "spec": spec.model_dump(mode="json"),
                    "ssh": self.ssh.model_dump(mode="json") if self.ssh else None,
                }
            )
        )
        (out / "logs").mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "bench.launch.supervisor", "--spec", str(spec_file), "--backend", self.name]
        log = out / "logs" / "supervisor.log"
        # Started by a shell that exits at once, so the supervisor is reparented away from whoever
        # launched it: an Airflow worker's (or scheduler's) teardown kills its process tree, and
        # must not take a running training job with it.
        starter = subprocess.run(
            ["sh", "-c", f"{shlex.join(argv)} >>{shlex.quote(str(log))} 2>&1 </dev/null & echo $!"],
            capture_output=True,
            text=True,
            check=True,
            start_new_session=True,
        )
        pid = int(starter.stdout.strip())
        return {
            "backend": self.name,
            "run_id": spec.run_id,
            "output_dir": str(out),
            "job_id": str(pid),
            "ranks": spec.ranks,
            "submitted": time.time(),
        }

    def poll(self, handle: Handle) -> tuple[RunState, str]:
        state_file = Path(handle["output_dir"]) / STATE
        pid = int(handle["job_id"])
        _reap(pid)
        try:
            doc = json.loads(state_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            doc = None
        alive = _alive(handle)
        if doc is None:
            if alive:
                return RunState.PENDING, ""
            return RunState.FAILED, f"supervisor {pid} exited before starting (see logs/supervisor.log)"
        state = RunState(doc["state"])
        if not state.finished and not alive:
            return RunState.FAILED, f"supervisor {pid} died while the run was {state}"
        return state, doc.get("reason", "")

    def cancel(self, handle: Handle) -> None:
        pid = int(handle["job_id"])
        if _alive(handle):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while _alive(handle) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.2)


class SshLauncher(DetachedLauncher):
    name = "ssh"

    def __init__(self, ssh: SshOptions) -> None:
        super().__init__(ssh)

    def check(self, spec: RunSpec) -> None:
        assert self.ssh is not None
        self.ssh.check_reachable(spec.hosts)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # not our child (another process launched it)
        os.waitpid(pid, os.WNOHANG)


def _alive(handle: Handle) -> bool:
    """The handle's supervisor is running: a reused pid (a late poll or cancel) is not it.

    Matched as a substring of the whole command line: between fork and exec the supervisor is
    still the starter's `sh -c '... --spec PATH ...'`, and it must read alive then too.
    """
    pid = int(handle["job_id"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(") ", 1)[1][0] == "Z":  # a zombie is not alive
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return str(Path(handle["output_dir"]) / SPEC).encode() in cmdline
