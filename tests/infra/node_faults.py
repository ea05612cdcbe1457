"""One namespace host made slow for real, as a degraded node is (issue 49): its mount's reads held by a
blkio throttle at the store's disk, or its CPU held by a cgroup cpu quota on everything it runs.

What a node's reads can be throttled at here: the nodes read the store over sshfs, a FUSE mount with no
block device of the node's own: its st_dev is an anonymous device (0:41 when measured), and writing
"0:41 2000000" to a group's blkio.throttle.read_bps_device fails with ENODEV (cgroup v1 blkio throttles
block devices only; v2's io controller is not enabled here, FEASIBILITY.md). The reads
that reach a disk are the store host's: the `sftp-server` that serves the node's mount reads the export
from its block device. A blkio limit on that device for exactly the processes serving one node's mount
is that node's reads slowed at the disk (as a NAS's per-client QoS, or one node's failing path to its
disk, slows that node alone): `mount_read_throttle`. The store lives on a loop device of its own
(tests.infra.faults.store_device) so that the limit holds nothing else on the machine, and the store
host's page cache is capped (`store_page_cache_cap`) so that a file one node read is not served to
the next from memory, unthrottled, as a cluster's store does not cache a dataset larger than its memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.faults import BLKIO, cpu_quota
from tests.infra.ssh_hosts import SshHosts

MEMORY = Path("/sys/fs/cgroup/memory")


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc/<pid>/stat's ppid."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    children, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def mount_servers(hosts: SshHosts, server: int, client: int) -> list[int]:
    """The `sftp-server` processes on host `server` that serve host `client`'s sshfs mount: those below
    the sshd connection whose peer is the client's address (`ss` in the server's namespace)."""
    done = subprocess.run(
        ["ip", "netns", "exec", hosts.namespace(server), "ss", "-tnpH", "state", "established"],
        capture_output=True,
        text=True,
        check=True,
    )
    owners = set()
    for line in done.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[2].endswith(":22") and cols[3].rsplit(":", 1)[0] == hosts.ip(client):
            owners.update(int(p) for p in re.findall(r"pid=(\d+)", line))
    return sorted({p for o in owners for p in descendants(o) if _comm(p) == "sftp-server"})


def _move(group: Path, pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            (group / "cgroup.procs").write_text(f"{pid}\n")


def _release(root: Path, group: Path) -> None:
    for pid in (group / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):
            (root / "cgroup.procs").write_text(f"{pid}\n")
    group.rmdir()


@contextlib.contextmanager
def mount_read_throttle(hosts: SshHosts, client: int, store: Path, rate: int, server: int = 0) -> Iterator[list[int]]:
    """Host `client`'s reads of the store held to `rate` bytes/s at the store's disk: the processes that
    serve its sshfs mount on host `server` in a blkio group limited on `store`'s block device (yields
    their pids; none found is a failed test, never a fault silently not injected). Lifted on exit."""
    pids = mount_servers(hosts, server, client)
    if not pids:
        pytest.fail(f"no sftp-server on {hosts.ip(server)} serves {hosts.ip(client)}'s mount")
    st = os.stat(store)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    group = BLKIO / f"scalewatch-node-read-{os.getpid()}-{client}"
    group.mkdir()
    knob = group / "blkio.throttle.read_bps_device"
    try:
        knob.write_text(f"{device} {rate}\n")
        _move(group, pids)
        yield pids
    finally:
        knob.write_text(f"{device} 0\n")
        _release(BLKIO, group)


@contextlib.contextmanager
def store_page_cache_cap(hosts: SshHosts, limit_bytes: int, server: int = 0) -> Iterator[Path]:
    """Host `server`'s sshd, and every session it starts from now on (the sftp-servers of mounts made
    after this), in a cgroup-v1 memory group capped at `limit_bytes`: the page cache its reads fill is
    reclaimed within the cap, so each read of the store reaches its disk. Lifted on exit."""
    if not (MEMORY / "memory.limit_in_bytes").exists():
        pytest.fail("cgroup-v1 memory controller is not mounted at /sys/fs/cgroup/memory")
    group = MEMORY / f"scalewatch-store-cache-{os.getpid()}-{hosts.network}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        _move(group, [hosts.procs[server].pid])
        yield group
    finally:
        _release(MEMORY, group)


@contextlib.contextmanager
def node_cpu_quota(hosts: SshHosts, node: int, cores: float) -> Iterator[Path]:
    """Host `node`'s CPU held to `cores` (a cgroup cpu quota): its sshd and everything below it, so every
    rank launched on it from now on runs under the quota, as on a node whose CPU is throttled. Lifted on
    exit (its processes back in the root group)."""
    with cpu_quota(cores, f"node{node}-{hosts.network}") as group:
        _move(group, descendants(hosts.procs[node].pid))
        yield group


@contextlib.contextmanager
def slurmd_cpu_quota(slurmd_pid: int, name: str, cores: float) -> Iterator[Path]:
    """One Slurm node's CPU held to `cores` (a cgroup-v1 cpu quota on its slurmd and what runs below it
    now): the slurmstepd it forks for each step, and the ranks that forks, inherit the group (the test
    cluster's TaskPlugin=task/none and proctrack/linuxproc move no process to a cgroup of their own), as
    on a node whose CPU is throttled. Lifted on exit."""
    with cpu_quota(cores, f"slurm-{name}") as group:
        _move(group, descendants(slurmd_pid))
        yield group


def evict(folder: Path) -> None:
    """Every file under `folder` synced and dropped from the page cache (POSIX_FADV_DONTNEED): the next
    read of it reaches the disk."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
