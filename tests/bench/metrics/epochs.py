"""One `bench train` epoch run for the storage-figure tests: the same SSD/DALI command everywhere."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import BENCH


def train_cmd(data: Path, out: Path, *extra: str) -> list[str]:
    return [BENCH, "train", "--workload", "ssd", "--data", str(data), "--batch-size", "8", "--loader", "dali",
            "--metrics-out", str(out), "--sample-interval", "0.25", *extra]  # fmt: skip


def train(data: Path, out: Path, *extra: str, prefix: str = "") -> dict:
    """The run's summary; `prefix`: a shell command run first in the same process (a cgroup to join)."""
    cmd = train_cmd(data, out, *extra)
    if prefix:
        cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())
