"""Storage figures against real I/O: true bytes, cache detection, and a real cgroup-v1 blkio throttle."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.data.generate import GenerateSpec, generate
from bench.metrics.summary import MIN_BANDWIDTH_WINDOW_S
from tests.bench.metrics.epochs import train
from tests.infra.faults import blkio_read_throttle

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("big") / "coco"
    generate(GenerateSpec("coco", root, images=240, min_side=700, max_side=900, seed=6))
    return root, sum(p.stat().st_size for p in (root / "images").iterdir())


def test_cold_epoch_reports_true_bytes_and_warm_epoch_is_flagged(big_dataset, tmp_path):
    data, true_bytes = big_dataset
    train(data, tmp_path / "warmup", "--steps", "2")  # libraries warm, as on any node that ran before
    summary = train(data, tmp_path / "m", "--epochs", "2", "--drop-caches")
    first, second = summary["epochs"]
    assert summary["storage"]["drop_caches"] == "done"
    assert first["bytes_from_storage"] == pytest.approx(true_bytes, rel=0.02)
    assert first["bytes_consumed"] == true_bytes and not first["cache_distorted"]
    assert second["bytes_from_storage"] < 0.02 * true_bytes
    assert second["cache_hit_ratio"] > 0.98 and second["cache_distorted"]
    assert summary["storage"]["cache_risk"] is True  # 60 MB against this machine's RAM
    # Cold and true; a rate only if the epoch read for MIN_BANDWIDTH_WINDOW_S or more. Here it reads for
    # ~2.5 s on an idle machine (a loaded one took over 5 s), so which side it lands on is the machine's:
    # the rule must hold on either, and the note names the window it judged (the throttled test below
    # reads long enough to be valid whatever the load).
    note = summary["storage"]["bandwidth_note"]
    if first["seconds"] < MIN_BANDWIDTH_WINDOW_S:
        assert summary["storage"]["bandwidth_valid"] is False
        assert "too short for a rate" in note and f"lasted {first['seconds']:.1f}s" in note, note
    else:
        assert summary["storage"]["bandwidth_valid"] is True and note == "", (first, note)


def evict_libraries() -> int:
    """Drop torch's and DALI's shared objects from the page cache, as on a node that just booted."""
    import os
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    count = 0
    for lib in [*(site / "torch").rglob("*.so*"), *(site / "nvidia").rglob("*.so*")]:
        fd = os.open(lib, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        finally:
            os.close(fd)
    return count


@pytest.mark.rates
def test_cold_libraries_and_cold_dataset_count_only_the_dataset(big_dataset, tmp_path):
    data, true_bytes = big_dataset
    assert evict_libraries() > 10
    summary = train(data, tmp_path / "m", "--epochs", "1")  # eviction of the dataset is the default
    first, storage = summary["epochs"][0], summary["storage"]
    assert storage["drop_caches"] == "done" and storage["bytes_source"] == "cachestat"
    assert first["bytes_from_storage"] == pytest.approx(true_bytes, rel=0.02)
    # The process counter saw the libraries' page-ins too: the reason it is only a labelled fallback.
    assert storage["first_epoch_bytes_by_source"]["procio"] > first["bytes_from_storage"] + 1e6


def test_warm_first_epoch_is_never_reported_as_storage_bandwidth(big_dataset, tmp_path):
    """A first epoch the page cache serves is labelled cache-distorted, never a storage rate. The dataset is
    put in the page cache by reading each file once here (what a previous run on the node leaves behind),
    not by a whole priming epoch of training: the cache, not the training, is what the run must see."""
    data, _ = big_dataset
    for path in sorted(data.rglob("*")):
        if path.is_file():
            path.read_bytes()
    summary = train(data, tmp_path / "m", "--epochs", "1", "--no-drop-caches")  # epoch 1 comes from cache
    assert summary["epochs"][0]["cache_distorted"] is True
    assert summary["storage"]["bandwidth_valid"] is False
    assert summary["storage"]["bandwidth_note"].startswith("cache-distorted: storage served")


@pytest.mark.rates
def test_measured_average_matches_a_blkio_throttle(big_dataset, tmp_path):
    data, true_bytes = big_dataset
    rate = 10 * 1024 * 1024  # 60 MB in ~6 s: long enough for a rate
    with blkio_read_throttle(data, rate) as prefix:
        summary = train(data, tmp_path / "m", "--epochs", "1", "--drop-caches", prefix=prefix)
    first = summary["epochs"][0]
    assert first["bytes_from_storage"] == pytest.approx(true_bytes, rel=0.02)  # the dataset's bytes only
    assert first["avg_read_mb_s"] == pytest.approx(rate / 1e6, rel=0.10)
    assert summary["storage"]["bandwidth_valid"] is True and summary["storage"]["bandwidth_note"] == ""
    assert first["peak_read_mb_s"] >= first["avg_read_mb_s"]
