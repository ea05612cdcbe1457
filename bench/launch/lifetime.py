"""Child processes that cannot outlive their parent: a SIGKILLed supervisor must not leave ranks behind.

Linux's parent-death signal (prctl PR_SET_PDEATHSIG) covers processes on this machine; a rank on a
remote host is tied to its ssh client's stdin instead (see `watch_stdin`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """For `preexec_fn`: deliver `sig` to this child when the process that forked it dies."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (AttributeError, OSError):
        return  # not Linux: the cancel path (process group, state file) still reaches the child
    if os.getppid() != parent:  # the parent died between fork and prctl
        os.kill(os.getpid(), sig)


def send_line(proc: subprocess.Popen, text: str) -> None:
    """Write one line to `proc`'s stdin and keep the pipe open (an ssh child's lifeline after it)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(f"{text}\n".encode())
        proc.stdin.flush()
    except BrokenPipeError:
        pass  # the child is already gone: its exit code reports it


def read_line(fd: int, limit: int = 256) -> str:
    """One line from `fd`, read a byte at a time so nothing after it is consumed (the rest of an ssh
    rank's stdin is its lifeline). Over `limit` bytes, or EOF first, is an error: a secret is short."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(line) >= limit:
            raise ValueError("stdin: expected one short line (the rendezvous secret) first")
        line += byte
    return line.decode().strip()


def watch_stdin(on_eof: Callable[[], None]) -> threading.Thread:
    """Call `on_eof` when stdin closes: over ssh, the supervisor's end of the pipe closing means it is gone."""

    def run() -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside the buffered reader holds its lock,
        # and the interpreter aborts at exit when it cannot take that lock.
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        on_eof()

    thread = threading.Thread(target=run, name="stdin-lifeline", daemon=True)
    thread.start()
    return thread
