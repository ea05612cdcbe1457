"""Node CPU and memory utilisation (percent), via psutil."""

from __future__ import annotations

import psutil


class SystemSource:
    name = "system"

    def __init__(self) -> None:
        psutil.cpu_percent(None)  # prime: the first call has no interval to measure over

    def sample(self) -> dict[str, float | None]:
        return {"cpu_util": psutil.cpu_percent(None), "mem_util": psutil.virtual_memory().percent}
