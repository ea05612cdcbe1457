"""Node CPU and memory utilisation (percent), and the rank's own slot cores' utilisation, via psutil.

The slot figure is what tells an input-CPU-bound rank (its cores saturated while it waits for data)
from a storage-bound one (its cores idle while it waits): the node figure mixes every rank's slot.
"""

from __future__ import annotations

import os

import psutil


class SystemSource:
    name = "system"

    def __init__(self) -> None:
        self.cores = sorted(os.sched_getaffinity(0))
        psutil.cpu_percent(None)  # prime: the first call has no interval to measure over
        psutil.cpu_percent(None, percpu=True)

    def sample(self) -> dict[str, float | None]:
        per_cpu = psutil.cpu_percent(None, percpu=True)
        mine = [per_cpu[c] for c in self.cores if c < len(per_cpu)]
        return {
            "cpu_util": psutil.cpu_percent(None),
            "slot_cpu_util": sum(mine) / len(mine) if mine else None,
            "mem_util": psutil.virtual_memory().percent,
        }
