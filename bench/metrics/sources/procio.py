"""Per-process I/O from /proc/<pid>/io over the rank's process tree (loader workers included).

read_bytes is what the storage layer served (page-cache hits do not count); rchar is what the
process asked for. Their gap is the cache's share.
"""

from __future__ import annotations

import os
import time

import psutil


def read_proc_io(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key.strip()] = int(value)
    return fields


# Finding a process's children scans every process on the node (~1.5 ms with 130 processes, more on a
# busy worker): done at most this often, while the known pids' counters are read on every sample.
TREE_RESCAN_S = 5.0


class ProcIoSource:
    name = "procio"

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid or os.getpid()
        self._gone: dict[str, int] = {"read_bytes": 0, "rchar": 0}
        self._last: dict[int, dict[str, int]] = {}
        self._pids: list[int] = []
        self._scanned = -float("inf")

    def _tree(self) -> list[int]:
        now = time.monotonic()
        if now - self._scanned >= TREE_RESCAN_S:
            try:
                root = psutil.Process(self.pid)
                self._pids = [self.pid, *(p.pid for p in root.children(recursive=True))]
            except psutil.NoSuchProcess:
                self._pids = []
            self._scanned = now
        return self._pids

    def sample(self) -> dict[str, float | None]:
        seen: dict[int, dict[str, int]] = {}
        for pid in self._tree():
            try:
                seen[pid] = read_proc_io(pid)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        for pid, last in self._last.items():  # keep what exited workers had read
            if pid not in seen:
                for key in self._gone:
                    self._gone[key] += last.get(key, 0)
        self._last = seen
        return {
            key: float(self._gone[key] + sum(io.get(key, 0) for io in seen.values())) for key in ("read_bytes", "rchar")
        }
