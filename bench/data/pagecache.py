"""Preparing a node's page cache for epoch 1: evicting the dataset's own pages (so epoch 1 reads from
storage) or warming them (the differential rerun that takes storage out), once per node, checked.

Moved out of the training loop: the loop asks for a prepared cache; how it is done, verified and
reported (`drop_caches` in the summary) lives here beside the page-cache record it reads."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from bench.collective import Collective
from bench.metrics.sources.pagecache import dataset_files, read_method, resident_bytes

EVICTION_LEFT_MAX = 0.02  # share of the dataset still resident after eviction that makes it "incomplete"


def _on_each_node(dist: Collective, data: Path | None, done: str, act) -> str:
    """`act(files)` on one rank per node, then the worst status of all nodes: `done`, "incomplete"
    (act returned False: more than EVICTION_LEFT_MAX of the dataset not where it should be) or
    "not_permitted" (an OSError)."""
    status = done
    if dist.local_rank == 0 and data is not None:
        try:
            if not act(dataset_files(data)):
                status = "incomplete"
        except OSError:
            status = "not_permitted"
    statuses = dist.allgather(status)
    for worst in ("not_permitted", "incomplete"):
        if worst in statuses:
            return worst
    return done


def _resident_share(files: list[tuple[Path, int]]) -> float | None:
    """Share of the dataset's bytes in the page cache now (None for an empty dataset)."""
    total = sum(size for _, size in files)
    if not total:
        return None
    method = read_method(files)
    return sum(resident_bytes(path, size, method) for path, size in files) / total


def drop_page_cache(dist: Collective, data: Path | None) -> str:
    """Evict the dataset's pages from this node's page cache before epoch 1 (one rank per node).

    Per file (POSIX_FADV_DONTNEED), not the global drop_caches: dropping everything also evicts the
    framework's shared libraries, whose page-ins during epoch 1 would then count as dataset reads.
    Dirty pages (a dataset generated or staged moments ago) cannot be dropped, so each file is synced
    first; what is still resident afterwards makes the eviction "incomplete", never silently "done".
    A storage server's own cache (NAS) is out of the client's reach: cache_served covers that.
    """

    def evict(files: list[tuple[Path, int]]) -> bool:
        for path, _ in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                with contextlib.suppress(OSError):  # read-only mounts; the residency check below decides
                    os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        share = _resident_share(files)
        return share is None or share <= EVICTION_LEFT_MAX

    # Every rank first ends what it reads before epoch 1 (its image check, its loader's build): a rank
    # still reading while its node is evicted left pages resident ("incomplete" on a default 2-rank run).
    dist.allgather("ready")
    return _on_each_node(dist, data, "done", evict)


def warm_page_cache(dist: Collective, data: Path | None) -> str:
    """Read every dataset file once before epoch 1 (one rank per node), so epoch 1 is served from the
    page cache: the differential rerun without storage. "warmed" only where all of it stayed resident."""

    def warm(files: list[tuple[Path, int]]) -> bool:
        for path, _ in files:
            with open(path, "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass
        share = _resident_share(files)
        return share is None or share >= 1 - EVICTION_LEFT_MAX

    return _on_each_node(dist, data, "warmed", warm)


def storage_lost(data: Path | None) -> str | None:
    """Why the dataset directory cannot be read now (ENOTCONN of a dead FUSE/NFS mount), or None."""
    if data is None:
        return None
    try:
        os.stat(data)
        next(os.scandir(data), None)
    except OSError as error:
        return error.strerror or str(error)
    return None
