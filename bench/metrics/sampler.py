"""A background thread sampling every source at a fixed rate into JSON-lines."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import IO

SAMPLER_NICE = 10


class Sampler:
    def __init__(self, sources: list, interval_s: float, out: Path | None, rank: int) -> None:
        self.sources, self.interval_s, self.rank = sources, interval_s, rank
        self.samples: list[dict] = []
        self.phase: dict[str, int | str] = {"epoch": 0, "phase": "setup"}
        self._stop = threading.Event()
        self._file: IO[str] | None = out.open("w") if out else None
        self._thread = threading.Thread(target=self._run, name="metric-sampler", daemon=True)

    def sample_now(self, settle: bool = False) -> dict:
        """settle: sources that sample in parts (the page-cache scan) complete first (epoch marks)."""
        if settle:
            for source in self.sources:
                if hasattr(source, "settle"):
                    source.settle()
        record: dict = {"t": time.time(), "rank": self.rank, **self.phase}
        for source in self.sources:
            record.update(source.sample())
        self.samples.append(record)
        if self._file:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        return record

    def _run(self) -> None:
        # The sampler shares the rank's slot with training: at a lower priority it waits for idle
        # moments instead of preempting a step (Linux lets one thread be reniced by its native id).
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SAMPLER_NICE)
        while not self._stop.wait(self.interval_s):
            self.sample_now()

    def start(self) -> Sampler:
        self.sample_now()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample_now()
        for source in self.sources:
            if hasattr(source, "close"):
                source.close()
        if self._file:
            self._file.close()
            self._file = None
