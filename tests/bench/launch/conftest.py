"""What the launcher tests share: idle ranks for the tests that judge a launcher's end of a run (a cancel,
a time limit, a poll, a lost node, a leftover sweep), not training."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def records(tmp_path_factory) -> Path:
    """A small records folder for idle ranks (emulated: real reads, then a timed wait per batch)."""
    from bench.data.records import RecordsSpec, generate_records

    folder = tmp_path_factory.mktemp("records")
    generate_records(RecordsSpec("raw", 8, 2, 20_000, 2_000, seed=3), folder)
    return folder


def idle(records: Path, steps: int = 100_000, accelerator_s: float = 0.5) -> dict:
    """TrainConfig fields for ranks that run as long as a test needs while keeping the cores free: an
    emulated workload (real records reads, then an `accelerator_s` wait per batch, no collective data).
    Ranks training flat out for as long cost the suite's CPU-bound phase 1 a core each (issue 51)."""
    return {"workload": "idle", "data": records, "accelerator_s": accelerator_s, "steps": steps}
