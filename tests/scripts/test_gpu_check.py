"""scripts/gpu-check.sh --dry-run: the GPU machine's check, run on this CPU machine, exits 0 and writes
the contract's JSON (device, runs with their keys, reference per workload)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_KEYS = {"workload", "precision", "backend", "loader", "synthetic", "images_per_s", "gpu_util"}
RUN_KEYS |= {"gpu_busy_share", "data_wait_share"}


@pytest.mark.slow
def test_dry_run_writes_the_contract_json(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "gpu-check.json").read_text())
    assert doc["device"] == "cpu (dry run)"
    assert {r["workload"] for r in doc["runs"]} == {"ssd", "deeplabv3plus"}
    for run in doc["runs"]:
        assert set(run) >= RUN_KEYS, run
        assert run["images_per_s"] > 0 and run["gpu_busy_share"] is None and run["gpu_util"] is None
    assert {(r["workload"], r["synthetic"]) for r in doc["runs"]} == {
        (w, s) for w in ("ssd", "deeplabv3plus") for s in (True, False)
    }
    assert set(doc["reference"]) == {"ssd", "deeplabv3plus"} and all(v > 0 for v in doc["reference"].values())
    assert any("fp16 on this CPU node refused" in n for n in doc["notes"])
    assert (tmp_path / "gpu-check.md").read_text().startswith("# gpu-check")
