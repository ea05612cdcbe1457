"""Emulated ranks (issue 39): a bring-your-own dataset in each supported format read through the real
records reader, its bytes counted by cachestat; the accelerator's wait per batch is the profile's.

Each format is read by the ranks' own reader in this process (a rank's start-up is 4 s of imports; one
real rank checks the whole path once, marked slow); the wait test times bench.workloads.emulate."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time

import pytest
import torch

from bench.data.records import RECORDS_MANIFEST, RecordsSpec, generate_records, load_records
from bench.loaders.records import file_records_loader
from bench.metrics.schema import validate_summary
from bench.workloads.accelerators import PROFILES
from bench.workloads.emulate import Accelerator, EmulatedModel
from tests.conftest import BENCH

# (format, files, records per file, record bytes): small, read in well under a second each
FORMATS = (("jpeg", 16, 1, 60_000), ("png", 16, 1, 60_000), ("npz", 16, 1, 200_000), ("raw", 8, 2, 150_000))


def _users_folder(root, fmt, files, per_file, size):
    """A format's folder as a user hands it over: no manifest (detected and listed at first read)."""
    folder = root / fmt
    generate_records(RecordsSpec(fmt, files, per_file, size, size // 10, seed=3), folder)
    (folder / RECORDS_MANIFEST).unlink()
    return folder


def _evict(folder) -> None:
    for f in folder.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@pytest.mark.parametrize(("fmt", "files", "per_file", "size"), FORMATS)
def test_a_users_dataset_is_read_in_its_format_and_cachestat_counts_its_bytes(tmp_path, fmt, files, per_file, size):
    """The emulated ranks' reader (decode on) over a cold folder; cachestat sees every byte come from storage."""
    from bench.loaders.base import LoaderOptions, Shard
    from bench.metrics.sources.pagecache import PageCacheSource

    folder = _users_folder(tmp_path, fmt, files, per_file, size)
    manifest = load_records(folder)
    assert manifest["format"] == fmt and (folder / RECORDS_MANIFEST).is_file()  # detected from the first bytes
    on_disk = sum(f["bytes"] for f in manifest["files"])
    opts = LoaderOptions(Shard(0, 1), 4, 64, 0, 0, torch.device("cpu"))
    loader = file_records_loader(folder, manifest, opts, decode=True, shuffle=True, prefetch=2)
    source = PageCacheSource(folder)
    assert source.method == "cachestat"
    _evict(folder)
    source.settle()
    batches = sum(1 for _ in loader.epoch())
    source.settle()
    records = sum(len(f["records"]) for f in manifest["files"])  # a user's raw file is one record, read whole
    assert batches == loader.steps_per_epoch == records // 4 and records % 4 == 0
    assert loader.stats.bytes_consumed == on_disk  # every record once
    # read from storage: the records' bytes, give or take readahead past a file's last record
    assert on_disk <= source.sample()["dataset_read_bytes"] <= on_disk + files * (128 << 10)


@pytest.mark.slow
def test_an_emulated_rank_over_a_users_folder_reports_what_it_read(tmp_path):
    """One real `bench train` rank (raw records, 2 per file, shuffled): the summary says it emulated, and
    epoch 1's bytes from storage (cachestat) are the folder's."""
    folder = _users_folder(tmp_path, "raw", 8, 2, 150_000)
    args = ["--workload", "byo-raw", "--data", str(folder), "--accelerator-s", "0.01", "--batch-size", "4"]
    args += ["--epochs", "1", "--warmup-steps", "0", "--loader-threads", "1", "--metrics-out", str(tmp_path / "m")]
    done = subprocess.run([BENCH, "train", *args, "--backend", "ddp"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    validate_summary(summary)
    on_disk = sum(f.stat().st_size for f in folder.iterdir() if f.name != RECORDS_MANIFEST)
    epoch = summary["epochs"][0]
    assert summary["emulated"] is True and summary["accelerator"] == "" and summary["accelerator_s"] == 0.01
    assert summary["storage"]["bytes_source"] == "cachestat" and summary["storage"]["drop_caches"] == "done"
    assert epoch["bytes_consumed"] == on_disk and 0.9 * on_disk <= epoch["bytes_from_storage"] <= 1.5 * on_disk


@pytest.mark.rates
def test_the_emulated_wait_per_batch_is_the_profiles_time_and_sleeps():
    """The wait, not the step's wall: each wait from compute's start to waking, with a real backward
    inside it, within 2% of retinanet-b200's 0.04755 s; and the process sleeps through it."""
    seconds = PROFILES["retinanet-b200"].seconds_per_batch
    acc, model = Accelerator(seconds), EmulatedModel(1 << 16)
    cpu = wall = 0.0
    for _ in range(20):
        loss = acc.loss(model, {})
        loss.backward()
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        acc.finish()  # the wait itself: this thread's CPU time over it
        cpu, wall = cpu + time.thread_time() - cpu0, wall + time.perf_counter() - wall0
    assert statistics.median(acc.waits) == pytest.approx(seconds, rel=0.02)
    assert min(acc.waits) >= seconds  # it never wakes early
    assert cpu < 0.1 * wall  # a timed wait: a busy loop would spend the whole wait on a core
    assert torch.count_nonzero(model.weight.grad) == 0
