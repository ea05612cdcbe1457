"""Foreign work on the rank's own cores: a noisy neighbour named by process, pid and core.

Every thread on the node reports the core it last ran on and its CPU time (/proc/<pid>/task/<tid>/stat);
between two samples, the CPU time of threads that are not the run's (this rank's process and its
children, loader workers, and the run's other ranks: the same `--spec` or `--metrics-out` in their command line)
and that ran on one of the slot's cores is foreign work on the slot. A share of the
slot's core-seconds, plus the busiest foreign process by name, pid and core. Threads can migrate
between samples, so the attribution is to the core a thread was last seen on: a pinned neighbour (the
case that hurts a pinned rank) is attributed exactly.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _thread_stats(proc: Path = PROC) -> dict[tuple[int, int], tuple[int, float, str]]:
    """(pid, tid) -> (last core, CPU seconds, command name) for every thread readable now."""
    out: dict[tuple[int, int], tuple[int, float, str]] = {}
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        pid = int(pid_dir.name)
        try:
            tids = os.listdir(pid_dir / "task")
        except OSError:
            continue
        for tid in tids:
            try:
                text = (pid_dir / "task" / tid / "stat").read_text()
            except OSError:
                continue  # a thread that ended between the listing and the read
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            # after the name: state is field 3, utime 14, stime 15, processor 39 (1-based in proc(5))
            utime, stime, core = int(fields[11]), int(fields[12]), int(fields[36])
            out[(pid, int(tid))] = (core, (utime + stime) / CLOCK_TICKS, name)
    return out


def own_pids(root: int) -> set[int]:
    """This rank's process and every process it started (loader workers), read now."""
    import psutil

    try:
        me = psutil.Process(root)
        return {root, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {root}


# What every rank of one run has in its command line: the run's rank settings file (`--spec`, how the
# launchers start ranks: bench.launch.train_spec) or, for ranks started by hand, its `--metrics-out` folder.
RUN_MARKER_FLAGS = ("--spec", "--metrics-out")


def run_marker(cmdline: list[str]) -> str | None:
    """The value of the first of RUN_MARKER_FLAGS in `cmdline` (`--flag value` or `--flag=value`)."""
    for flag in RUN_MARKER_FLAGS:
        for i, arg in enumerate(cmdline[:-1]):
            if arg == flag:
                return cmdline[i + 1]
        found = next((a.split("=", 1)[1] for a in cmdline if a.startswith(flag + "=")), None)
        if found is not None:
            return found
    return None


def _uid(pid: int, proc: Path = PROC) -> int | None:
    """The effective uid of `pid` (status's Uid line: real, effective, saved, fs), None if it is gone."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[2])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cmdline(pid: int, proc: Path = PROC) -> list[str]:
    try:
        return (proc / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


# A scan reads every thread's stat file (3 ms for 100 threads here, ~60 ms for a GPU node's 2,000):
# at most one per this many seconds, whatever the sampler's rate; samples in between repeat the last.
MIN_SCAN_INTERVAL_S = 1.0


class InterferenceSource:
    name = "interference"

    def __init__(self, cores: list[int] | None = None, root: int | None = None, proc: Path = PROC) -> None:
        self.cores = set(cores if cores is not None else os.sched_getaffinity(0))
        self.root = root if root is not None else os.getpid()
        self.proc = proc
        # The run's other ranks (another rank of this host left unpinned, or a namespace "host" on the same
        # kernel) share the marker: their work is the run's own contention, not a neighbour's.
        self.marker = run_marker(_cmdline(self.root, proc))
        self.uid = _uid(self.root, proc)
        self._peer: dict[int, bool] = {}
        self._last = _thread_stats(proc)
        self._t = time.monotonic()
        self._result: dict[str, float | str | None] = {"foreign_cpu_share": None, "foreign_top": None}

    def sample(self) -> dict[str, float | str | None]:
        if time.monotonic() - self._t < MIN_SCAN_INTERVAL_S:
            return dict(self._result)
        self._result = self._scan()
        return dict(self._result)

    def _scan(self) -> dict[str, float | str | None]:
        now, t = _thread_stats(self.proc), time.monotonic()
        wall = t - self._t
        mine = own_pids(self.root)
        foreign: dict[tuple[int, int, str], float] = {}  # (pid, core, name) -> CPU seconds on the slot
        for key, (core, cpu, name) in now.items():
            if core not in self.cores or key[0] in mine or self._of_the_run(key[0]):
                continue
            before = self._last.get(key)
            used = cpu - before[1] if before else 0.0  # a thread first seen now: no interval to charge
            if used > 0:
                foreign[(key[0], core, name)] = foreign.get((key[0], core, name), 0.0) + used
        self._last, self._t = now, t
        if wall <= 0 or not self.cores:
            return {"foreign_cpu_share": None, "foreign_top": None}
        share = sum(foreign.values()) / (wall * len(self.cores))
        top = None
        if foreign:
            (pid, core, name), seconds = max(foreign.items(), key=lambda kv: kv[1])
            top = f"{name} (pid {pid}) on core {core}, {seconds / wall:.0%} of it"
        return {"foreign_cpu_share": min(1.0, share), "foreign_top": top}

    def _of_the_run(self, pid: int) -> bool:
        """Whether `pid` is one of this run's ranks (or their loader workers): the same run marker, and the
        same user (a run's ranks are one job's; another user's process naming the run's spec in its command
        line is a neighbour still, not a way to hide its CPU from the figure)."""
        if self.marker is None:
            return False
        if pid not in self._peer:
            self._peer[pid] = self.marker in _cmdline(pid, self.proc) and _uid(pid, self.proc) == self.uid
        return self._peer[pid]
