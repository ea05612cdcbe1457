"""Real fault injection: find a run's rank processes through /proc and kill them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def train_pids(output_dir: Path, rank: int | None = None, exact: bool = False) -> list[int]:
    """`bench train` processes writing into output_dir (optionally one rank). Without `exact` a folder
    whose name starts with output_dir's counts too (ssd-2 matches ssd-2-repeat); with it, only that one."""
    pids = []
    needle = str(output_dir).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        cmd = _read(f"/proc/{entry}/cmdline")
        if b"bench\x00train" not in cmd or needle not in cmd:
            continue
        if exact and not any(arg == needle or arg.startswith(needle + b"/") for arg in cmd.split(b"\x00")):
            continue
        env = _read(f"/proc/{entry}/environ").split(b"\x00")
        if rank is None or f"HOROVOD_RANK={rank}".encode() in env:
            pids.append(int(entry))
    return pids


def cmdline(pid: int) -> bytes:
    """A process's NUL-separated argv (b"" once it has exited)."""
    return _read(f"/proc/{pid}/cmdline")


def any_pids(pattern: bytes) -> list[int]:
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and pattern in _read(f"/proc/{e}/cmdline") and int(e) != os.getpid()
    ]


def wait_for(predicate, timeout: float = 60, interval: float = 0.2, what: str = "condition"):
    """predicate()'s first truthy value, polled every `interval` s; TimeoutError naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not met within {timeout:g} s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat (0 once it is gone)."""
    text = _read(f"/proc/{pid}/stat").decode()
    if not text:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()  # after the command name: state is field 3 in proc(5)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kill_rank_when_training(output_dir: Path, rank: int, sig: int = signal.SIGKILL, timeout: float = 90) -> int:
    """Wait until the rank has written samples (it is mid-epoch), then kill it."""
    samples = output_dir / "metrics" / f"samples-rank{rank}.jsonl"
    wait_for(lambda: samples.exists() and samples.read_text().count("\n") >= 2, timeout)
    pid = wait_for(lambda: train_pids(output_dir, rank), timeout)[0]
    os.kill(pid, sig)
    return pid


@contextlib.contextmanager
def small_disk(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at mount_point (made here): a real disk that fills up."""
    mount_point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)]).returncode != 0:
        pytest.fail("cannot mount a tmpfs for a disk-full test (needs root)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)])


@contextlib.contextmanager
def store_device(image: Path, mount_point: Path, size_mb: int, pids: list[int] = ()) -> Iterator[Path]:
    """An ext4 file system on a loop device of its own, mounted at mount_point (made here), also in the
    mount namespaces of `pids` (a namespace host's sshd, made before this mount, does not see it): a
    store whose reads a blkio throttle can hold without holding the reads of everything else on the
    machine's disk. Throttled on the root disk, a rank that had to page a library back in (the page
    cache can be emptied under a run) read it at the store's rate and did not start in 15 minutes."""
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    made = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"cannot attach a loop device (needs root): {made.stderr.strip()}")
    device = made.stdout.strip()
    namespaces = [("nsenter", "--mount", "--target", str(pid)) for pid in pids]
    mounted: list[tuple[str, ...]] = []
    try:
        subprocess.run(["mkfs.ext4", "-q", device], check=True)
        mount_point.mkdir()
        for enter in [(), *namespaces]:
            subprocess.run([*enter, "mount", device, str(mount_point)], check=True)
            mounted.append(enter)
        yield mount_point
    finally:
        for enter in reversed(mounted):
            subprocess.run([*enter, "umount", str(mount_point)])
        subprocess.run(["losetup", "--detach", device])
        image.unlink()


BLKIO = Path("/sys/fs/cgroup/blkio")


@contextlib.contextmanager
def blkio_throttle(path: Path, rate: int, direction: str = "read", pids: list[int] = ()) -> Iterator[str]:
    """A cgroup-v1 blkio group that caps `direction` ("read" or "write") bytes/s on `path`'s device at
    `rate`; yields the shell prefix that puts a command into it, and moves `pids` (running processes)
    into it too. The limit is lifted, its processes go back to the root group and the group is removed
    on exit.

    Writes: v1 charges a write to the group of the task that submits it (an O_DIRECT write, or the
    writeback an fsync starts in the task); pages the kernel's flusher writes in the background go to
    the root group and escape the limit, so a writer held by it must fsync before the flusher starts
    (bench.storage.checkpoint syncs every 64 MiB). Use a store of its own (store_device): on the root disk
    the limit would also hold every other process put in the group."""
    knob = f"blkio.throttle.{direction}_bps_device"
    if not (BLKIO / knob).exists():
        pytest.fail("cgroup-v1 blkio controller is not mounted at /sys/fs/cgroup/blkio")
    st = os.stat(path)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    group = BLKIO / f"scalewatch-test-{direction}-{os.getpid()}"
    group.mkdir(exist_ok=True)
    try:
        (group / knob).write_text(f"{device} {rate}\n")
        for pid in pids:
            (group / "cgroup.procs").write_text(f"{pid}\n")
        yield f"echo $$ > {group}/cgroup.procs"
    finally:
        (group / knob).write_text(f"{device} 0\n")
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (BLKIO / "cgroup.procs").write_text(f"{pid}\n")
        group.rmdir()


def blkio_read_throttle(path: Path, rate: int, pids: list[int] = ()):
    """blkio_throttle on reads (the name the storage tests use)."""
    return blkio_throttle(path, rate, "read", pids)


def allowed_cpus(pid: int) -> list[int]:
    """The kernel's Cpus_allowed_list of a process, expanded: what the process may really run on."""
    from bench.slots import parse_cpulist

    for line in _read(f"/proc/{pid}/status").decode().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpulist(line.split(":", 1)[1])
    return []


def rank_of(pid: int) -> int | None:
    for item in _read(f"/proc/{pid}/environ").split(b"\x00"):
        if item.startswith(b"HOROVOD_RANK="):
            return int(item.split(b"=", 1)[1])
    return None


def slots_while_training(output_dir: Path, ranks: int, timeout: float = 120) -> dict[int, list[int]]:
    """Each rank's allowed CPUs, read from /proc while its `bench train` process runs."""
    seen: dict[int, list[int]] = {}

    def all_seen():
        for pid in train_pids(output_dir):
            rank = rank_of(pid)
            if rank is not None and rank not in seen:
                seen[rank] = allowed_cpus(pid)
        return len(seen) == ranks

    wait_for(all_seen, timeout, 0.1)
    return seen


CPU = Path("/sys/fs/cgroup/cpu")


@contextlib.contextmanager
def cpu_quota(cores: float, name: str) -> Iterator[Path]:
    """A cgroup-v1 cpu group capped at `cores` of CPU time (CFS quota over a 100 ms period); yields the
    group (write a pid into its cgroup.procs). Its processes go back to the root group and the group is
    removed on exit."""
    if not CPU.is_dir():
        pytest.fail("cgroup-v1 cpu controller is not mounted at /sys/fs/cgroup/cpu")
    group = CPU / f"scalewatch-{name}-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(round(cores * 100000)))
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (CPU / "cgroup.procs").write_text(pid)
        group.rmdir()
