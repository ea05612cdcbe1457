"""Per-process I/O from /proc/<pid>/io over the rank's process tree (loader workers included).

read_bytes is what the storage layer served (page-cache hits do not count); rchar is what the
process asked for. Their gap is the cache's share.
"""

from __future__ import annotations

import os

import psutil


def read_proc_io(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key.strip()] = int(value)
    return fields


class ProcIoSource:
    name = "procio"

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid or os.getpid()
        self._gone: dict[str, int] = {"read_bytes": 0, "rchar": 0}
        self._last: dict[int, dict[str, int]] = {}

    def sample(self) -> dict[str, float | None]:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        seen: dict[int, dict[str, int]] = {}
        for proc in procs:
            try:
                seen[proc.pid] = read_proc_io(proc.pid)
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
