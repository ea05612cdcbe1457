"""A checkpoint's files on the store under test: DeepSpeed's names, DLIO's split, writing a shard with
fsync, reading one cold (evicted, cachestat-checked), and removing exactly the files and folders a
run made. The phase that runs these on every rank at once is bench.storage.checkpoint.

Every file is created and opened relative to its folder's descriptor with O_NOFOLLOW (bench.safe_fs):
a planted link redirects no write, no read and no removal. A shard's file is created unnamed
(O_TMPFILE) and named with linkat once written and fsynced, which follows no link and fails on any
name already there (as O_EXCL): a rank killed mid-write leaves no file, the kernel frees it. On a
store without unnamed files (NFS, older overlayfs) the name is made at once with O_EXCL|O_NOFOLLOW;
a rank killed there leaves its cut-short file, which `bench checkpoint` reports as left.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.data.pagecache import EVICTION_LEFT_MAX
from bench.errors import BenchError
from bench.metrics.sources.pagecache import resident_bytes
from bench.safe_fs import CREATE_FLAGS, Refusal, lstat_at, open_dir, open_regular, open_root, parent

KINDS: tuple[str, ...] = ("model_states", "optim_states")
# DLIO's ZeRO-3 layout per parameter: 2 bytes of fp16 weights (model states), 12 of fp32 master
# weights and Adam's two moments (optimizer states).
MODEL_SHARE = (2, 14)
ROOT_PREFIX = "scalewatch-checkpoint-"
CHUNK = 8 << 20  # bytes per write() and per read() of a size-mode shard
FLUSH_BYTES = 64 << 20  # dirty bytes a rank may hold before its fsync: far below any flusher threshold
BLOCK = 4096  # deduplicating stores compare blocks of this size (or larger): each one is unique


class CheckpointError(BenchError):
    """A checkpoint phase could not run: a shard missing or not the file its rank wrote, a peer failed."""


REFUSAL = Refusal(CheckpointError, "checkpoint files are written and read without following links")


# What a model-mode rank saves: {"model_states": ..., "optim_states": ...}, each given to torch.save.
States = Mapping[str, Any]


def shard_names(rank: int) -> dict[str, str]:
    """DeepSpeed's names for data-parallel rank `rank`'s ZeRO shard (no model parallelism here: mp 0)."""
    return {kind: f"zero_pp_rank_{rank}_mp_rank_00_{kind}.pt" for kind in KINDS}


def step_folder(step: int) -> str:
    return f"global_step{step}"


def size_split(bytes_per_rank: int) -> dict[str, int]:
    """Bytes of each of a size-mode shard's two files (DLIO's ZeRO-3 split)."""
    model = bytes_per_rank * MODEL_SHARE[0] // MODEL_SHARE[1]
    return {"model_states": model, "optim_states": bytes_per_rank - model}


@dataclass(frozen=True)
class Created:
    """A file or folder this run made, as it was when the run last touched it. A file is removed only
    while `rel` still names a regular file with this inode, size and change time: a freed inode number
    is reused at once (ext4 gave a file made after an unlink the unlinked file's inode), its change
    time is not. A folder's change time moves with every entry, so a folder is matched by inode alone
    (and removed only when empty)."""

    rel: str
    ino: int
    size: int = 0
    ctime_ns: int = 0

    @classmethod
    def of(cls, rel: str, st: os.stat_result) -> Created:
        return cls(rel, st.st_ino, st.st_size, st.st_ctime_ns)

    def matches(self, st: os.stat_result) -> bool:
        return (st.st_ino, st.st_size, st.st_ctime_ns) == (self.ino, self.size, self.ctime_ns)


@dataclass(frozen=True)
class Naming:
    """A complete unnamed file about to be named (`_name`), journaled first: a rank killed between its
    naming and its journal of `made` leaves a named file that only this record can tell is ours. The
    naming itself moves the file's change time, so it is matched by inode, size and modification time
    (which naming leaves as writing left it), and a change time no earlier than this record's: an inode
    number freed because the naming never happened and handed to another file gives that file its own
    modification time."""

    rel: str
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, rel: str, st: os.stat_result) -> Naming:
        return cls(rel, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def matches(self, st: os.stat_result) -> bool:
        same = (st.st_ino, st.st_size, st.st_mtime_ns) == (self.ino, self.size, self.mtime_ns)
        return same and st.st_ctime_ns >= self.ctime_ns


def fresh_folder(top: int, directory: Path, prefix: str, mode: int, what: str) -> str:
    """The name of a folder made in `top` under a random name that was never there (mkdir fails on any
    existing entry, a planted link included), for a checkpoint's shards or a rank's saves."""
    for _ in range(8):
        name = prefix + secrets.token_hex(6)
        try:
            os.mkdir(name, mode, dir_fd=top)
            return name
        except FileExistsError:
            continue
    raise CheckpointError(f"{directory}: no fresh name for {what} after 8 tries")


def make_folders(directory: Path, writes: int, made: list[Created] | None = None) -> list[Created]:
    """Rank 0's folders: a fresh, uniquely named root (never one that was there) and a folder per
    checkpoint in it, each added to `made` as it is made (so a failure half-way still removes them);
    returned root first."""
    made = [] if made is None else made
    with open_root(directory) as top:
        root = fresh_folder(top, directory, ROOT_PREFIX, 0o755, "the checkpoint folder")
        root_fd = open_dir(top, root, directory / root, REFUSAL)
        try:
            made.append(Created.of(root, os.fstat(root_fd)))
            for step in range(writes):
                os.mkdir(step_folder(step), 0o755, dir_fd=root_fd)
                made.append(Created.of(f"{root}/{step_folder(step)}", lstat_at(root_fd, step_folder(step))))
        finally:
            os.close(root_fd)
    return made


def remove_files(directory: Path, files: list[Created] | list[Created | Naming]) -> tuple[int, list[str]]:
    """Remove each file that still is the one we created (`Created.matches`, or `Naming.matches` for a
    file a killed rank named but did not journal as made; a regular file);
    (how many were removed, what was left and why). Nothing else is ever removed."""
    removed, left = 0, []
    for item in files:
        try:
            with open_root(directory) as top, parent(top, directory, item.rel, REFUSAL) as (fd, name):
                st = lstat_at(fd, name)
                if st is None:
                    left.append(f"{item.rel}: gone before cleanup")
                elif not stat.S_ISREG(st.st_mode) or not item.matches(st):
                    left.append(f"{item.rel}: no longer the file this run wrote; left as it is")
                else:
                    os.unlink(name, dir_fd=fd)
                    removed += 1
        except (OSError, CheckpointError) as error:
            left.append(f"{item.rel}: not removed ({error})")
    return removed, left


def remove_folders(directory: Path, folders: list[Created]) -> list[str]:
    """Remove the folders rank 0 made, deepest first, each only while it is ours and empty."""
    left = []
    for item in reversed(folders):
        try:
            with open_root(directory) as top, parent(top, directory, item.rel, REFUSAL) as (fd, name):
                st = lstat_at(fd, name)
                if st is None:
                    continue
                if not stat.S_ISDIR(st.st_mode) or st.st_ino != item.ino:
                    left.append(f"{item.rel}: no longer the folder this run made; left as it is")
                    continue
                os.rmdir(name, dir_fd=fd)
        except OSError as error:
            left.append(f"{item.rel}: not removed ({error.strerror or error})")
        except CheckpointError as error:
            left.append(f"{item.rel}: not removed ({error})")
    return left


class _SyncedWriter(io.RawIOBase):
    """A file object whose bytes reach the store as they are written: fsync every FLUSH_BYTES and at
    the end (`finish`). torch.save writes a model-mode shard through it."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd, self.written, self._dirty = fd, 0, 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        n = len(view)
        while view:
            view = view[os.write(self.fd, view) :]  # a network file system may take part of it
        self.written += n
        self._dirty += n
        if self._dirty >= FLUSH_BYTES:
            self.finish()
        return n

    def finish(self) -> None:
        os.fsync(self.fd)
        self._dirty = 0


class Pattern:
    """A size-mode shard's bytes: one random chunk per rank and run, each 4 KiB block of every chunk
    written stamped with a counter unique to the rank, so no block repeats (no dedup) and none
    compresses. The stamping is one vectorised store per chunk."""

    def __init__(self, seed: int, rank: int) -> None:
        import numpy as np

        self._np = np
        self.buf = np.frombuffer(bytearray(np.random.default_rng(seed).bytes(CHUNK)), dtype=np.uint8)
        self.stamps = self.buf.view(np.uint64)[:: BLOCK // 8]
        self.next = rank << 40

    def chunk(self, n: int) -> memoryview:
        count = len(self.stamps)
        self.stamps[:] = self._np.arange(self.next, self.next + count, dtype=self._np.uint64)
        self.next += count
        return memoryview(self.buf)[:n]


def _evict(fd: int) -> None:
    """The dataset's eviction (bench.data.pagecache.drop_page_cache) for one open file: dirty pages
    cannot be dropped, so sync first; a read-only mount refuses the fsync and the check decides."""
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


_METHOD: dict[str, str] = {}  # how this process asks the page cache, settled at its first ask


def residency_method() -> str | None:
    """How this process asks whether a read was cold: cachestat or mincore (None before its first read)."""
    return _METHOD.get("method")


def _resident(fd: int, size: int, path: Path) -> int:
    """Bytes of the open file in this node's page cache: cachestat, or mincore where it is missing."""
    if "method" not in _METHOD:
        try:
            resident_bytes(path, size, "cachestat", fd)
            _METHOD["method"] = "cachestat"
        except OSError:
            _METHOD["method"] = "mincore"
    return resident_bytes(path, size, _METHOD["method"], fd)


@dataclass
class Shard:
    """What a rank writes: a size (raw bytes of `Pattern`) or a model's states (torch.save)."""

    sizes: dict[str, int]
    pattern: Pattern | None = None
    states: States | None = None

    def fill(self, kind: str, out: _SyncedWriter) -> None:
        if self.states is not None:
            import torch

            torch.save(self.states[kind], out)
            return
        assert self.pattern is not None
        left = self.sizes[kind]
        while left > 0:
            n = min(CHUNK, left)
            out.write(self.pattern.chunk(n))
            left -= n


# Stores without unnamed files (NFS, some FUSE; EISDIR: a kernel before 3.11) get a named file at once.
NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)


def _create(dir_fd: int, name: str) -> tuple[int, bool]:
    """(descriptor, named): an unnamed file in the folder (O_TMPFILE), named only once it is complete
    (`_name`), so a rank killed mid-write leaves nothing: the kernel frees an unnamed file with the
    last descriptor. Where the store has no unnamed files, the name at once, O_EXCL|O_NOFOLLOW."""
    try:
        return os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o644, dir_fd=dir_fd), False
    except OSError as error:
        if error.errno not in NO_TMPFILE:
            raise
    return os.open(name, CREATE_FLAGS, 0o644, dir_fd=dir_fd), True


def _name(fd: int, dir_fd: int, name: str) -> None:
    """Give a complete unnamed file its name. linkat never follows a link at the name and fails where
    anything is there (EEXIST): the same guarantee as O_EXCL|O_NOFOLLOW."""
    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)


def write_shard(
    directory: Path, root: str, step: int, rank: int, shard: Shard, made: list[Created],
    noted: Callable[[list[Created]], Any] = lambda made: None,
    naming: Callable[[Naming], Any] = lambda intent: None,
) -> dict:  # fmt: skip
    """One checkpoint of this rank: both files, each fsynced and only then named (`_create`), timed
    from the first create to the last name; then evicted (not timed), so no later read finds them in
    this node's cache. A file goes into `made` once it has a name, so a rank that fails half-way
    still removes it, and one killed half-way leaves no shard behind (an unnamed file is freed; one
    named before is in `made` when `noted` is called with it, for another process to remove; one
    killed between a naming and that `noted` left its `Naming`, given to `naming` before the name)."""
    folder = f"{root}/{step_folder(step)}"
    total, fds = 0, []  # fds: (index in made, descriptor)
    try:
        start = time.perf_counter()
        for kind, name in shard_names(rank).items():
            rel = f"{folder}/{name}"
            with open_root(directory) as top, parent(top, directory, rel, REFUSAL) as (dir_fd, n):
                fd, named = _create(dir_fd, n)
                try:
                    if named:  # killed before the file is complete, it no longer matches its record: left, named
                        made.append(Created.of(rel, os.fstat(fd)))
                        fds.append((len(made) - 1, fd))
                        noted(made)
                    out = _SyncedWriter(fd)
                    shard.fill(kind, out)
                    out.finish()
                    if named:
                        made[fds[-1][0]] = Created.of(rel, os.fstat(fd))
                    else:
                        naming(Naming.of(rel, os.fstat(fd)))  # before the name: a kill after it is covered
                        _name(fd, dir_fd, n)
                        made.append(Created.of(rel, os.fstat(fd)))
                        fds.append((len(made) - 1, fd))
                    noted(made)
                except BaseException:
                    if all(f != fd for _, f in fds):
                        _claim_if_named(fd, dir_fd, n, rel, made)  # named just before a stop (SIGTERM)
                        os.close(fd)  # never named: closing it frees it
                    raise
            total += out.written
        seconds = time.perf_counter() - start
        for _, fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        for index, fd in fds:  # as the file is now (written, or half-written by a failing rank): still ours
            made[index] = Created.of(made[index].rel, os.fstat(fd))
            os.close(fd)
    return {"step": step, "bytes": total, "seconds": seconds}


def _claim_if_named(fd: int, dir_fd: int, name: str, rel: str, made: list[Created]) -> None:
    """A failure (a SIGTERM's SystemExit) between `_name` and `made.append`: where the name holds this
    very file, it goes into `made`, so the rank's own cleanup removes it."""
    with contextlib.suppress(OSError):
        st, there = os.fstat(fd), lstat_at(dir_fd, name)
        if there is not None and stat.S_ISREG(there.st_mode) and (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino):
            made.append(Created.of(rel, st))


def _read_into(fd: int, states: bool) -> None:
    """Read the whole file as a restart would: torch.load for a model's states, else plain reads."""
    if states:
        import torch

        with io.BufferedReader(io.FileIO(fd, "rb", closefd=False), CHUNK) as f:
            torch.load(f, map_location="cpu", weights_only=True)
        return
    buf = bytearray(CHUNK)
    while os.readv(fd, [buf]):
        pass


def read_shard(
    directory: Path, root: str, step: int, source: int, files: dict[str, dict], states: bool, ready: Callable[[], Any]
) -> dict:
    """Another rank's checkpoint, cold: opened (never through a link, and only the inode its writer
    created), evicted and checked before every rank starts at once; timed over both files."""
    opened: list[tuple[int, int, Path]] = []
    try:
        for name in shard_names(source).values():
            rel = f"{root}/{step_folder(step)}/{name}"
            with open_root(directory) as top, parent(top, directory, rel, REFUSAL) as (dir_fd, n):
                fd = open_regular(dir_fd, n, directory / rel, REFUSAL)
            opened.append((fd, 0, directory / rel))
            st = os.fstat(fd)
            wrote = files.get(rel)
            # inode and size: a change time is each client's view of it, and may differ between nodes
            if wrote is None or (st.st_ino, st.st_size) != (wrote["ino"], wrote["size"]):
                raise CheckpointError(f"{directory / rel}: not the file rank {source} wrote; not read")
            os.set_blocking(fd, True)
            _evict(fd)
            opened[-1] = (fd, st.st_size, directory / rel)
        before = sum(_resident(fd, size, path) for fd, size, path in opened)
        ready()  # the phase's meeting point: every rank's files evicted, all reads start together
        start = time.perf_counter()
        for fd, _, _ in opened:
            _read_into(fd, states)
        seconds = time.perf_counter() - start
        after = sum(_resident(fd, size, path) for fd, size, path in opened)
        for fd, _, _ in opened:
            _evict(fd)
    finally:
        for fd, _, _ in opened:
            os.close(fd)
    size = sum(size for _, size, _ in opened)
    return {
        "step": step,
        "from_rank": source,
        "bytes": size,
        "seconds": seconds,
        "resident_before": before,
        "storage_bytes": max(0, after - before),
        "cold": before <= EVICTION_LEFT_MAX * size,
    }
