"""The detached supervisor the local and ssh launchers share (bench.launch.local, bench.launch.ssh): the run
is handed to a supervisor process and its state file polled.

The supervisor starts from `/` with `python -P` and the allow-listed environment (bench.launch.environment),
so neither a planted `bench/` package nor the worker's secrets reach it or its ranks. Its state file is
read back as any run-folder file is (bench.safe_fs.read_json): a link, FIFO or device there, or a
document without a valid state, is an UNKNOWN poll naming it, never a hang or a read of another file."""

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

from bench.config.models import RunSpec
from bench.launch.base import Handle, RunState
from bench.launch.environment import SAFE_CWD, python_module, tool_environment
from bench.launch.sshopts import SshOptions
from bench.launch.supervisor import CANCEL_REQUEST, HEARTBEAT_S, STATE
from bench.safe_fs import MalformedFile, open_append, read_json, reason_text, write_file

SPEC = "spec.json"
# The supervisor rewrites state.json every HEARTBEAT_S; a RUNNING state older than this is a dead supervisor.
STALE_AFTER_S = 20 * HEARTBEAT_S
# A poll that cannot see the supervisor's pid waits this long for its first state file.
START_GRACE_S = 120.0
STATE_MAX_BYTES = 64 << 10  # a state file is a few hundred bytes: its reason is bounded where written


def _here() -> dict[str, str]:
    """Where this process stands: a pid means something only to a poller in the same pid namespace."""
    import socket

    try:
        ns = os.readlink("/proc/self/ns/pid")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        ns = boot = ""
    return {"pid_ns": ns, "boot_id": boot, "host": socket.gethostname()}


def _supervisor_log(path: Path):
    """The supervisor's log, opened to append; a link at its name or at `logs/` is refused, naming it."""
    try:
        return open_append(path)
    except OSError as err:
        from bench.errors import LaunchError

        raise LaunchError(
            f"{path}: the supervisor's log could not be opened ({err.strerror}; a link there is never followed)"
        ) from err


class DetachedLauncher:
    name = "local"
    poll_s = 0.25  # a poll reads the state file on the output folder (and a pid): cheap

    def __init__(self, ssh: SshOptions | None = None) -> None:
        self.ssh = ssh

    def check(self, spec: RunSpec) -> None:
        """Every rank runs here: as many slots as this machine's usable cores allow."""
        from bench.train.slots import check_capacity, usable_cpus

        check_capacity("localhost", spec.ranks, spec.where.cpus_per_rank, spec.where.oversubscribe, usable_cpus())
        _check_memory(spec)

    def submit(self, spec: RunSpec) -> Handle:
        self.check(spec)
        out = spec.output_dir
        out.mkdir(parents=True, exist_ok=True)
        for stale in (STATE, CANCEL_REQUEST):
            (out / stale).unlink(missing_ok=True)
        spec_file = out / SPEC
        doc = json.dumps(
            {"spec": spec.model_dump(mode="json"), "ssh": self.ssh.model_dump(mode="json") if self.ssh else None}
        )
        # The supervisor gets its spec over its stdin, never by reading the run folder back: the folder may
        # be on a store others write (a node's root on the stack's shared volume), and the spec names the
        # interpreter it starts and the ssh config it passes (`ssh -F`). The file is a record for people.
        write_file(spec_file, doc)
        (out / "logs").mkdir(exist_ok=True)
        flags = ["--spec", str(spec_file), "--backend", self.name]
        argv = python_module(sys.executable, "bench.launch.supervisor", *flags)
        # Started by a shell that exits at once, so the supervisor is reparented away from whoever
        # launched it: an Airflow worker's (or scheduler's) teardown kills its process tree, and
        # must not take a running training job with it. Its log is opened here, never through a link
        # planted at its name (a shell's `>>` would follow one), and handed over as a descriptor.
        with _supervisor_log(out / "logs" / "supervisor.log") as log:
            # the log is the starter's stderr, and the supervisor's stdout and stderr after it (sh knows
            # descriptors 0-9 only, so the log's own number is never written into the command)
            starter = subprocess.run(
                ["sh", "-c", f"exec 3<&0; {shlex.join(argv)} 1>&2 <&3 3<&- & echo $!"],
                input=doc,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                check=True,
                start_new_session=True,
                env=tool_environment(),
                cwd=SAFE_CWD,
            )
        pid = int(starter.stdout.strip())
        return {
            "backend": self.name,
            "run_id": spec.run_id,
            "output_dir": str(out),
            "job_id": str(pid),
            "ranks": spec.ranks,
            "submitted": time.time(),
            "where": _here(),
        }

    def poll(self, handle: Handle) -> tuple[RunState, str]:
        """The run's state from its state file (on the shared output folder), read wherever the poll runs.

        The supervisor's pid is consulted only by a poller in the pid namespace that started it (a
        triggerer in another container sees other pids); elsewhere the state file's heartbeat decides.
        """
        pid = int(handle["job_id"])
        local = _same_pid_namespace(handle)
        if local:
            _reap(pid)
        try:
            doc = read_state(Path(handle["output_dir"]))
        except (OSError, MalformedFile) as error:  # RefusedFile (a link, a FIFO) is an OSError
            return RunState.UNKNOWN, f"state file unreadable: {reason_text(error)}"
        if doc is None:
            if local:
                if _alive(handle):
                    return RunState.PENDING, ""
                return RunState.FAILED, f"supervisor {pid} exited before starting (see logs/supervisor.log)"
            if time.time() - float(handle.get("submitted", 0)) < START_GRACE_S:
                return RunState.PENDING, ""
            return RunState.FAILED, f"no state file {START_GRACE_S:.0f}s after submit (see logs/supervisor.log)"
        state, reason = RunState(doc["state"]), reason_text(doc["reason"])
        if state.finished:
            return state, reason
        if local and not _alive(handle):
            return RunState.FAILED, f"supervisor {pid} died while the run was {state}"
        age = time.time() - float(doc["updated"])
        if age > STALE_AFTER_S:
            return RunState.FAILED, f"supervisor {pid} stopped updating {STATE} {age:.0f}s ago while {state}"
        return state, reason

    def cancel(self, handle: Handle) -> None:
        """Ask the supervisor through the output folder (works from any container); signal it too where we can."""
        out = Path(handle["output_dir"])
        with contextlib.suppress(OSError):
            write_file(out / CANCEL_REQUEST, json.dumps({"requested": time.time()}))
        pid = int(handle["job_id"])
        local = _same_pid_namespace(handle)
        if local and _alive(handle):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if local:
                _reap(pid)
                if not _alive(handle):
                    return
            elif self.poll(handle)[0].finished:
                return
            time.sleep(0.2)


def read_state(out: Path) -> dict | None:
    """The supervisor's state file in `out`, None while there is none: a JSON object with a known `state`,
    a string `reason` and a number `updated`. MalformedFile for any other content; RefusedFile for a link,
    a FIFO, a device or a file over STATE_MAX_BYTES (never followed, never blocking)."""
    try:
        doc = read_json(out, STATE, STATE_MAX_BYTES, {"state": str, "reason": str, "updated": (int, float)})
    except FileNotFoundError:
        return None
    if doc["state"] not in RunState.__members__:
        raise MalformedFile(f"{out / STATE}: state {reason_text(repr(doc['state']), 40)} is not a run state")
    return doc


# A rank's resident memory: the framework's base plus activations, rounded up from the input batch.
RANK_BASE_BYTES = 1 << 30
ACTIVATION_FACTOR = 32


def _check_memory(spec: RunSpec) -> None:
    """Every rank of a local run shares this machine's memory: refuse what cannot fit, naming the figures."""
    import psutil

    from bench.errors import LaunchError

    t = spec.train
    per_rank = RANK_BASE_BYTES + ACTIVATION_FACTOR * t.batch_size * 3 * t.image_size**2 * 4
    available = psutil.virtual_memory().available
    if spec.ranks * per_rank > available:
        raise LaunchError(
            f"host localhost: {spec.ranks} ranks x ~{per_rank / 2**30:.1f} GiB (batch_size {t.batch_size}, "
            f"image_size {t.image_size}) exceed the {available / 2**30:.1f} GiB available"
        )


def _same_pid_namespace(handle: Handle) -> bool:
    """True where the handle's pid names the same process for us as for its submitter."""
    where = handle.get("where")
    if not where:  # a handle from before pid namespaces were recorded: trust /proc, as then
        return True
    here = _here()
    return all(where.get(k) == here[k] and here[k] for k in ("pid_ns", "boot_id", "host"))


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # not our child (another process launched it)
        os.waitpid(pid, os.WNOHANG)


def _alive(handle: Handle) -> bool:
    """The handle's supervisor is running: a reused pid (a late poll or cancel) is not it.

    Matched as a substring of the whole command line: between fork and exec the supervisor is
    still the starter's `sh -c '... --spec PATH ...'`, and it must read alive then too. Inside execve
    the new image's command line reads empty for a moment: that is the supervisor starting, not a
    reused pid (one sweep in twenty of benchmark section 8 polled in that moment, called the
    supervisor dead and cancelled it).
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
    return not cmdline or str(Path(handle["output_dir"]) / SPEC).encode() in cmdline
