"""The dataset's own bytes served by storage, read from the page cache's record of the dataset's files.

/proc/<pid>/io's read_bytes counts every page-in of the process: on a fresh node, epoch 1 also pages in
torch's and DALI's shared objects (50.6 MB "read" for a 0.56 MB dataset). This source looks only at
the dataset's files: every scan asks the kernel how many of each file's pages are resident, and counts
each rise (a page that became resident was read from storage; an evicted page that comes back is
counted again). cachestat(2) (Linux 6.5+) answers with one syscall per file; older kernels fall back
to mmap + mincore(2). The figure is the node's: ranks that share a kernel and a filesystem share its
page cache, so one rank per cache domain (boot id, device) samples it and the summary counts it once.

O_DIRECT reads bypass the cache and are not seen (the loaders here read through it). A file costs about
6 us to ask (open, cachestat, close); one sample asks only files not yet wholly resident, for at most
SCAN_BUDGET_S, and continues where it stopped; the epoch marks settle with a full scan. So an epoch's
total is exact while its pages stay resident until scanned, and the timeline's resolution is the
rotation period, which the summary widens the peak window to (docs/metrics.md).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
_SYS_CACHESTAT = {"x86_64": 451, "aarch64": 451}
_LOW_BIT = bytes(b & 1 for b in range(256))
# CPU a sample may spend scanning: at 4 Hz at most 2% of one core on the node's sampling rank.
SCAN_BUDGET_S = 0.005


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_uint64) for n in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


_CACHESTAT_NR = _SYS_CACHESTAT.get(os.uname().machine)
_WHOLE_FILE = _Range(0, 0)  # len 0: to the end of the file


def _cachestat_pages(fd: int) -> int:
    stat = _Stat()
    if _CACHESTAT_NR is None:
        raise OSError(38, os.strerror(38))
    if _libc.syscall(_CACHESTAT_NR, fd, ctypes.byref(_WHOLE_FILE), ctypes.byref(stat), 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(stat.nr_cache)


def _mincore_pages(fd: int, size: int) -> int:
    if size == 0:
        return 0
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    try:
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        if _libc.mincore(addr, size, vec) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return bytes(vec).translate(_LOW_BIT).count(1)  # bit 0: resident; the others are reserved
    finally:
        _libc.munmap(addr, size)


def cachestat_supported(probe: Path) -> bool:
    fd = os.open(probe, os.O_RDONLY)
    try:
        _cachestat_pages(fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def read_method(files: list[tuple[Path, int]]) -> str:
    """cachestat where this kernel answers it for the dataset's files, else mincore."""
    return "cachestat" if files and cachestat_supported(files[0][0]) else "mincore"


def resident_bytes(path: Path, size: int, method: str, fd: int | None = None) -> int:
    """Bytes of `path` in this node's page cache now (pages beyond the end are not bytes of the file);
    `fd`: an already open descriptor of it (no open on a network mount, where each is a round trip)."""
    own = fd is None
    if own:
        fd = os.open(path, os.O_RDONLY)
    try:
        pages = _cachestat_pages(fd) if method == "cachestat" else _mincore_pages(fd, size)
    finally:
        if own:
            os.close(fd)
    return min(pages * PAGE, size)


def _open_all(files: list[tuple[Path, int]]) -> list[int | None]:
    """Descriptors for as many files as half the process's descriptor limit allows: asking an open file
    needs no FUSE/NFS open round trip (measured: over a rate-limited sshfs link, per-file opens made a
    scan take seconds and smeared the epoch's timeline); the rest are opened per scan."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = max(0, soft // 2 - 64)
    fds: list[int | None] = []
    for i, (path, _) in enumerate(files):
        try:
            fds.append(os.open(path, os.O_RDONLY) if i < room else None)
        except OSError:
            fds.append(None)
    return fds


def dataset_files(root: Path) -> list[tuple[Path, int]]:
    return sorted((p, p.stat().st_size) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def cache_domain(path: Path) -> str:
    """Ranks with the same domain share one page cache for `path`: same kernel, same filesystem."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = os.uname().nodename
    return f"{boot}:{os.stat(path).st_dev}"


class PageCacheSource:
    """Cumulative dataset bytes paged in since construction: `dataset_read_bytes`."""

    name = "pagecache"

    def __init__(self, root: Path, budget_s: float = SCAN_BUDGET_S, method: str | None = None) -> None:
        self.root = root
        self.files = dataset_files(root)
        self.method = method or read_method(self.files)
        self.budget_s = budget_s
        self.read_bytes = 0
        self.errors = 0
        self._seen = [0] * len(self.files)
        self._fds = _open_all(self.files)
        self._cursor = 0
        self.rotation_s = 0.0  # how long the last pass over the pending files took: the timeline's resolution
        self._rotation_start = time.monotonic()
        self._lock = threading.Lock()
        self._scan(full=True, count=False)  # the baseline: what was resident before the run

    def _scan(self, full: bool, count: bool = True) -> None:
        """full: every file (the epoch marks). Otherwise only files not yet wholly resident, for at most
        the budget, from where the last scan stopped: a resident file cannot bring in more pages, and
        one that is evicted again is seen at the next full scan."""
        n = len(self.files)
        deadline = None if full else time.perf_counter() + self.budget_s
        for _ in range(n):
            i = self._cursor
            self._cursor = (i + 1) % n
            if self._cursor == 0:
                now_t = time.monotonic()
                self.rotation_s, self._rotation_start = now_t - self._rotation_start, now_t
            path, size = self.files[i]
            if not full and self._seen[i] >= size:
                continue
            try:
                now = resident_bytes(path, size, self.method, self._fds[i])
            except OSError:  # gone (a lost mount): the loader fails the run; the count stops growing
                self.errors += 1
                continue
            if count and now > self._seen[i]:
                self.read_bytes += now - self._seen[i]
            self._seen[i] = now
            if deadline is not None and time.perf_counter() > deadline:
                break

    def close(self) -> None:
        with self._lock:
            for fd in self._fds:
                if fd is not None:
                    os.close(fd)
            self._fds = [None] * len(self.files)

    def settle(self) -> None:
        """A full scan: the epoch marks call it so an epoch's total does not wait for the rotation."""
        with self._lock:
            if self.files:
                self._scan(full=True)

    def sample(self) -> dict[str, float | None]:
        with self._lock:
            if self.files:
                self._scan(full=False)
            return {
                "dataset_read_bytes": float(self.read_bytes),
                "dataset_resident_bytes": float(sum(self._seen)),
                "dataset_scan_errors": float(self.errors),
                "dataset_scan_period_s": float(self.rotation_s),
            }
