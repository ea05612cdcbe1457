"""Emulated ranks (issue 39): a bring-your-own dataset in each supported format read through the real
records reader, its bytes counted by cachestat; the accelerator's wait per batch is the profile's.

The ranks are real `bench train` processes (one per format, started together: each reads and evicts
only its own folder); the wait test times bench.workloads.emulate directly."""

from __future__ import annotations

import json
import statistics
import subprocess
import time

import pytest
import torch

from bench.data.records import RECORDS_MANIFEST, RecordsSpec, generate_records
from bench.metrics.schema import validate_summary
from bench.workloads.accelerators import PROFILES
from bench.workloads.emulate import Accelerator, EmulatedModel
from tests.conftest import BENCH

# (format, files, records per file, record bytes): small, so the four ranks take a few seconds
FORMATS = (("jpeg", 16, 1, 60_000), ("png", 16, 1, 60_000), ("npz", 16, 1, 200_000), ("raw", 8, 2, 150_000))


@pytest.fixture(scope="module")
def byo_runs(tmp_path_factory):
    """Each format's folder as a user hands it over (no manifest: detected and listed at first read),
    then one emulated rank over it: evicted first, 2 epochs of 4-record batches."""
    root = tmp_path_factory.mktemp("byo")
    procs = {}
    for fmt, files, per_file, size in FORMATS:
        folder = root / fmt
        generate_records(RecordsSpec(fmt, files, per_file, size, size // 10, seed=3), folder)
        (folder / RECORDS_MANIFEST).unlink()  # the user's own files: nothing of ours beside them
        args = ["--workload", f"byo-{fmt}", "--data", str(folder), "--accelerator-s", "0.01", "--batch-size", "4"]
        args += [
            "--epochs",
            "1",
            "--warmup-steps",
            "0",
            "--loader-threads",
            "1",
            "--metrics-out",
            str(root / f"m-{fmt}"),
        ]
        args += ["--backend", "ddp", "--decode", "--sample-interval", "0.2"]
        procs[fmt] = subprocess.Popen(
            [BENCH, "train", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    out = {}
    for fmt, proc in procs.items():
        log, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, log[-3000:]
        out[fmt] = (root / fmt, json.loads((root / f"m-{fmt}" / "summary.json").read_text()))
    return out


@pytest.mark.parametrize("fmt", [f[0] for f in FORMATS])
def test_a_users_dataset_is_read_in_its_format_and_cachestat_counts_its_bytes(byo_runs, fmt):
    folder, summary = byo_runs[fmt]
    validate_summary(summary)
    manifest = json.loads((folder / RECORDS_MANIFEST).read_text())
    assert manifest["format"] == fmt  # detected from the files' first bytes, never declared here
    on_disk = sum(f["bytes"] for f in manifest["files"])
    epoch = summary["epochs"][0]
    assert summary["emulated"] is True and summary["storage"]["drop_caches"] == "done"
    assert summary["storage"]["bytes_source"] == "cachestat"
    # every record was read once (batches of 4 cover the folder), and the storage served those bytes
    assert epoch["bytes_consumed"] == on_disk
    assert epoch["bytes_from_storage"] >= 0.9 * on_disk
    assert epoch["bytes_from_storage"] <= 1.5 * on_disk + (1 << 20)


@pytest.mark.rates
def test_the_emulated_wait_per_batch_is_the_profiles_time_and_sleeps():
    """The wait, not the step's wall: each wait from compute's start to waking, with a real backward
    inside it, within 2% of retinanet-b200's 0.04755 s; and the process sleeps through it."""
    seconds = PROFILES["retinanet-b200"].seconds_per_batch
    acc, model = Accelerator(seconds), EmulatedModel(4 << 20)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(20):
        loss = acc.loss(model, {})
        loss.backward()
        acc.finish()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert statistics.median(acc.waits) == pytest.approx(seconds, rel=0.02)
    assert min(acc.waits) >= seconds  # it never wakes early
    assert cpu < 0.5 * wall  # a timed wait: a busy loop would spend the whole wall on a core
    assert torch.count_nonzero(model.weight.grad) == 0
