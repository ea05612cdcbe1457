"""Shared fixtures: small generated datasets and paths to the project's own interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
PY = sys.executable
BENCH = str(Path(PY).with_name("bench"))
HOROVODRUN = str(Path(PY).with_name("horovodrun"))


def oversubscribed_ranks() -> int:
    """Three ranks per core this process may use: a scale that cannot be near-linear on this machine."""
    return 3 * len(os.sched_getaffinity(0))


@pytest.fixture(scope="session")
def datasets(tmp_path_factory) -> dict[str, Path]:
    from bench.data.generate import GenerateSpec, generate

    root = tmp_path_factory.mktemp("datasets")
    out = {}
    for kind in ("coco", "segmentation"):
        generate(GenerateSpec(kind, root / kind, images=32, seed=1))
        out[kind] = root / kind
    return out
