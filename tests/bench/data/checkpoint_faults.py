"""A real write limit on a store: cgroup-v1 blkio `write_bps_device` (the read limit is
tests.infra.faults.blkio_read_throttle)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.faults import BLKIO


@contextlib.contextmanager
def blkio_write_throttle(path: Path, rate: int) -> Iterator[str]:
    """A cgroup-v1 blkio group that caps writes to `path`'s device at `rate` bytes/s; yields the shell
    prefix that puts a command into it. The limit is lifted, its processes go back to the root group
    and the group is removed on exit.

    v1 charges a write to the group of the task that submits it: an O_DIRECT write, or the writeback an
    fsync starts in the task. Pages the kernel's flusher writes in the background are charged to the
    root group and escape the limit, so a writer held by it must fsync before the flusher starts
    (bench.data.checkpoint syncs every 64 MiB). Use a store of its own (tests.infra.faults.store_device):
    on the root disk the limit would also hold every other writer put in the group."""
    if not (BLKIO / "blkio.throttle.write_bps_device").exists():
        pytest.fail("cgroup-v1 blkio controller is not mounted at /sys/fs/cgroup/blkio")
    st = os.stat(path)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    group = BLKIO / f"scalewatch-write-test-{os.getpid()}"
    group.mkdir(exist_ok=True)
    try:
        (group / "blkio.throttle.write_bps_device").write_text(f"{device} {rate}\n")
        yield f"echo $$ > {group}/cgroup.procs"
    finally:
        (group / "blkio.throttle.write_bps_device").write_text(f"{device} 0\n")
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (BLKIO / "cgroup.procs").write_text(f"{pid}\n")
        group.rmdir()
