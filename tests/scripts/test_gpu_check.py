"""scripts/gpu-check.sh --dry-run: the GPU machine's check, run on this CPU machine, exits 0 and writes
the contract's JSON (device, runs with their keys, reference per workload, the interleaved pairs' ratios)
and the accelerator profile."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN_KEYS = {"workload", "precision", "backend", "loader", "synthetic", "images_per_s", "gpu_util"}
RUN_KEYS |= {"gpu_busy_share", "data_wait_share"}
PAIR_KEYS = {"workload", "precision", "ratio", "ci_low", "ci_high", "n"}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[dict, Path]:
    """One dry run for the module's tests (it takes a few minutes)."""
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "OUT": str(out)}
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "gpu-check.json").read_text()), out


@pytest.mark.slow
def test_dry_run_writes_the_contract_json(dry_run):
    doc, tmp_path = dry_run
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
    assert doc["complete"] is True


@pytest.mark.slow
def test_dry_run_interleaves_pairs_and_writes_the_accelerator_profile(dry_run):
    doc, out = dry_run
    assert {(p["workload"], p["precision"]) for p in doc["pairs"]} == {("ssd", "bf16"), ("deeplabv3plus", "bf16")}
    for pair in doc["pairs"]:
        assert set(pair) >= PAIR_KEYS and pair["n"] == 2, pair  # 2 pairs in a dry run, 6 on a GPU
        assert 0 < pair["ci_low"] <= pair["ratio"] <= pair["ci_high"]
    paired = [r for r in doc["runs"] if r["pair"] is not None]
    assert sorted((r["workload"], r["pair"]) for r in paired) == [
        (w, i) for w in ("deeplabv3plus", "ssd") for i in (0, 1)
    ]
    assert all(r["synthetic"] and r["gpu_busy_note"] == "no GPU" for r in paired)
    profile = yaml.safe_load((out / "accelerators.yaml").read_text())
    assert doc["accelerator_profile"] == str(out / "accelerators.yaml")
    assert profile["version"] == 1 and profile["dry_run"] is True and profile["accelerator"] == "cpu (dry run)"
    assert profile["source"] == "scripts/gpu-check.sh on cpu (dry run)" and profile["measured_at"]
    for workload in ("ssd", "deeplabv3plus"):
        entry = profile["workloads"][workload]["bf16"]
        assert entry["batch_size"] == 8 and entry["seconds_per_batch"] > 0 and entry["runs"] == 2
        assert entry["gpu_busy_share"] is None  # no GPU: no figure
