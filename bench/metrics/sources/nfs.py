"""NFS client counters from /proc/self/mountstats for the mount holding the dataset path."""

from __future__ import annotations

import os
from pathlib import Path


def nfs_mount_of(path: Path, mounts: str = "/proc/self/mounts") -> str | None:
    best = None
    real = os.path.realpath(path)
    with open(mounts) as f:
        for line in f:
            _, mountpoint, fstype, *_ = line.split()
            inside = real == mountpoint or real.startswith(mountpoint.rstrip("/") + "/")
            if fstype.startswith("nfs") and inside and (best is None or len(mountpoint) > len(best)):
                best = mountpoint
    return best


def parse_mountstats(text: str, mountpoint: str) -> dict[str, int] | None:
    """`bytes:` line fields 5 and 6 (server reads, O_DIRECT excluded) for one mount."""
    current = None
    for line in text.splitlines():
        if line.startswith("device "):
            parts = line.split()
            current = parts[4] if len(parts) > 4 else None
        elif current == mountpoint and line.strip().startswith("bytes:"):
            nums = [int(x) for x in line.split()[1:]]
            return {"nfs_normal_read_bytes": nums[0], "nfs_server_read_bytes": nums[4]}
    return None


class NfsSource:
    name = "nfs"

    def __init__(self, path: Path) -> None:
        self.mountpoint = nfs_mount_of(path)

    def sample(self) -> dict[str, float | None]:
        if self.mountpoint is None:
            return {"nfs_server_read_bytes": None}
        with open("/proc/self/mountstats") as f:
            stats = parse_mountstats(f.read(), self.mountpoint)
        return {"nfs_server_read_bytes": None if stats is None else float(stats["nfs_server_read_bytes"])}
