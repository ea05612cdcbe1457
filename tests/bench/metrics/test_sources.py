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


# The block nfs_show_stats() writes per NFS mount (fs/nfs/super.c, kernel 6.x): this kernel has no NFS
# client to produce one, so this is that function's format, with a second mount whose figures differ.
KERNEL_MOUNTSTATS = """device sysfs mounted on /sys with fstype sysfs
device 10.0.0.1:/export mounted on /mnt/nas with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,acregmax=60,hard,proto=tcp,timeo=600
\tage:\t1234
\timpl_id:\tname='',domain='',date='0,0'
\tcaps:\tcaps=0x3ffbffff,wtmult=512,dtsize=1048576,bsize=0,namlen=255
\tsec:\tflavor=1,pseudoflavor=1
\tevents:\t52 1024 0 0 35 21 1222 0 0 2048 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
\tbytes:\t314572800 0 4096 0 318767104 0 76800 0
\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)
\txprt:\ttcp 0 0 1 0 30 4721 4721 0 4721 0 2 0 0
\tper-op statistics
\t        NULL: 1 1 0 44 24 0 0 0 0
\t        READ: 300 300 0 60000 318810000 10 3000 3100 0
device 10.0.0.2:/scratch mounted on /mnt/scratch with fstype nfs statvers=1.1
\topts:\trw,vers=3
\tbytes:\t7 0 0 0 9 0 1 0
"""


def test_nfs_parse_reads_the_kernels_block_for_the_right_mount():
    nas = parse_mountstats(KERNEL_MOUNTSTATS, "/mnt/nas")
    assert nas == {"nfs_normal_read_bytes": 314572800, "nfs_server_read_bytes": 318767104}
    assert parse_mountstats(KERNEL_MOUNTSTATS, "/mnt/scratch")["nfs_server_read_bytes"] == 9
    assert parse_mountstats(KERNEL_MOUNTSTATS, "/sys") is None


def test_pagecache_counts_only_the_dataset_pages_that_came_in(tmp_path):
    from bench.metrics.sources.pagecache import PageCacheSource

    data = tmp_path / "ds"
    data.mkdir()
    for i in range(3):
        (data / f"{i}.bin").write_bytes(os.urandom(1 << 20))
    other = tmp_path / "library.so"
    other.write_bytes(os.urandom(4 << 20))
    for f in [*data.iterdir(), other]:
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    for method in ("cachestat", "mincore"):
        source = PageCacheSource(data, method=method)
        assert source.sample()["dataset_resident_bytes"] == 0
        other.read_bytes()  # not the dataset: never counted
        (data / "0.bin").read_bytes()
        source.settle()
        assert source.sample()["dataset_read_bytes"] == 1 << 20
        for f in data.iterdir():  # evicted and read again: storage served it twice
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        source.settle()
        (data / "0.bin").read_bytes()
        (data / "1.bin").read_bytes()
        source.settle()
        assert source.sample()["dataset_read_bytes"] == 3 << 20, method
        for f in data.iterdir():
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def test_pagecache_uses_cachestat_on_this_kernel(tmp_path):
    from bench.metrics.sources.pagecache import PageCacheSource, cache_domain

    (tmp_path / "f").write_bytes(b"x" * 10)
    assert PageCacheSource(tmp_path).method == "cachestat"  # Linux 6.5+; 6.18 here
    assert cache_domain(tmp_path) == cache_domain(tmp_path / "f")  # one kernel, one filesystem
