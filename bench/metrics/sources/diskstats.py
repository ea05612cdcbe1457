"""Node-level reads of the block device behind the dataset path, from /proc/diskstats."""

from __future__ import annotations

import os
from pathlib import Path

SECTOR = 512


def device_of(path: Path) -> str | None:
    """Kernel name of the block device holding `path` (partition resolved), or None (tmpfs, NFS)."""
    dev = os.stat(path).st_dev
    sys_path = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not sys_path.exists():
        return None
    return sys_path.resolve().name


def sectors_read(device: str) -> int | None:
    with open("/proc/diskstats") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 5 and parts[2] == device:
                return int(parts[5])
    return None


class DiskstatsSource:
    name = "diskstats"

    def __init__(self, path: Path) -> None:
        self.device = device_of(path)

    def sample(self) -> dict[str, float | None]:
        if self.device is None:
            return {"disk_read_bytes": None}
        sectors = sectors_read(self.device)
        return {"disk_read_bytes": None if sectors is None else float(sectors * SECTOR)}
