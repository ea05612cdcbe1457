"""Metric sources on this machine's real /proc, and the NFS parser on the kernel's documented format."""

from __future__ import annotations

import os
from pathlib import Path

from bench.metrics.sources.diskstats import DiskstatsSource, device_of
from bench.metrics.sources.nfs import NfsSource, nfs_mount_of, parse_mountstats
from bench.metrics.sources.nvml import NvmlSource
from bench.metrics.sources.procio import ProcIoSource
from bench.metrics.sources.system import SystemSource

MOUNTSTATS = """device proc mounted on /proc with fstype proc
device nas:/export mounted on /mnt/nas with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2
\tbytes:\t1000\t0\t0\t0\t2500\t0\t10\t0
"""


def test_procio_counts_this_process_reads(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    source = ProcIoSource()
    before = source.sample()["rchar"]
    path.read_bytes()
    assert source.sample()["rchar"] - before >= 1 << 20


def test_diskstats_finds_the_root_device():
    assert device_of(Path("/")) is not None
    assert DiskstatsSource(Path("/")).sample()["disk_read_bytes"] > 0


def test_nfs_parse_and_absent_mount(tmp_path):
    assert parse_mountstats(MOUNTSTATS, "/mnt/nas") == {"nfs_normal_read_bytes": 1000, "nfs_server_read_bytes": 2500}
    mounts = tmp_path / "mounts"
    mounts.write_text("nas:/export /mnt/nas nfs4 rw 0 0\n/dev/vda / ext4 rw 0 0\n")
    assert nfs_mount_of(Path("/mnt/nas/coco"), str(mounts)) == "/mnt/nas"
    assert NfsSource(tmp_path).sample() == {"nfs_server_read_bytes": None}


def test_no_gpu_means_null_not_zero():
    assert NvmlSource(None).sample() == {"gpu_util": None, "gpu_mem_util": None, "gpu_mem_used_bytes": None}
    sample = SystemSource().sample()
    assert 0 <= sample["cpu_util"] <= 100 and 0 < sample["mem_util"] <= 100
