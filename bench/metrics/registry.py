"""The one place metric sources are named and built from the run's config."""

from __future__ import annotations

from pathlib import Path

from bench.metrics.sources.diskstats import DiskstatsSource
from bench.metrics.sources.nfs import NfsSource
from bench.metrics.sources.nvml import NvmlSource
from bench.metrics.sources.procio import ProcIoSource
from bench.metrics.sources.system import SystemSource

SOURCES = ("system", "nvml", "procio", "diskstats", "nfs")


def build_sources(data_path: Path | None, gpu_index: int | None, names: tuple[str, ...] = SOURCES) -> list:
    built = []
    for name in names:
        if name == "system":
            built.append(SystemSource())
        elif name == "nvml":
            built.append(NvmlSource(gpu_index))
        elif name == "procio":
            built.append(ProcIoSource())
        elif name == "diskstats" and data_path is not None:
            built.append(DiskstatsSource(data_path))
        elif name == "nfs" and data_path is not None:
            built.append(NfsSource(data_path))
    return built
