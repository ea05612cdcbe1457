"""The one place metric sources are named and built from the run's config."""

from __future__ import annotations

from pathlib import Path

from bench.metrics.sources.diskstats import DiskstatsSource
from bench.metrics.sources.interference import InterferenceSource
from bench.metrics.sources.nfs import NfsSource
from bench.metrics.sources.nvml import NvmlSource
from bench.metrics.sources.pagecache import PageCacheSource
from bench.metrics.sources.procio import ProcIoSource
from bench.metrics.sources.s3 import S3BytesSource
from bench.metrics.sources.system import SystemSource

SOURCES = ("system", "nvml", "procio", "pagecache", "diskstats", "nfs", "interference", "s3")
# Counters of a node's page cache, block device or mount: one rank per cache domain samples them.
NODE_SOURCES = ("pagecache", "diskstats", "nfs")
# Which counter a run's dataset bytes come from, best first: (sample key, bytes_source label).
BYTE_COUNTERS = (
    ("s3_read_bytes", "s3"),
    ("dataset_read_bytes", "pagecache"),
    ("nfs_server_read_bytes", "nfs_mountstats"),
    ("disk_read_bytes", "diskstats"),
    ("read_bytes", "procio"),
)
# Counters of one rank's own reads (every rank samples them; the run's bytes are their sum).
RANK_COUNTERS = ("s3_read_bytes", "read_bytes")


def build_sources(
    data_path: Path | None,
    gpu_index: int | None,
    node_sampler: bool = True,
    names: tuple[str, ...] = SOURCES,
    s3_received=None,
) -> list:
    """node_sampler: this rank samples the node-level counters for its cache domain (local rank 0);
    s3_received: the loader's counter of bytes its S3 reads received (None: the dataset is files)."""
    built = []
    for name in names:
        if name in NODE_SOURCES and not node_sampler:
            continue
        if name == "system":
            built.append(SystemSource())
        elif name == "nvml":
            built.append(NvmlSource(gpu_index))
        elif name == "interference":
            built.append(InterferenceSource())
        elif name == "procio":
            built.append(ProcIoSource())
        elif name == "pagecache" and data_path is not None:
            built.append(PageCacheSource(data_path))
        elif name == "diskstats" and data_path is not None:
            built.append(DiskstatsSource(data_path))
        elif name == "nfs" and data_path is not None:
            built.append(NfsSource(data_path))
        elif name == "s3" and s3_received is not None:
            built.append(S3BytesSource(s3_received))
    return built
