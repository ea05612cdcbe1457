"""The run summary from recorded rank reports, with any `Collective` for the run's place: no ranks,
no training, so the summary's figures are checked in a second (tests/bench/train covers real ranks)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.config.models import TrainConfig
from bench.metrics.schema import validate_summary
from bench.metrics.summary import summarise

# One rank's end-of-run report from a real 2-epoch SSD/DALI run on 32 generated images (`bench train`).
REPORT = json.loads((Path(__file__).parent / "data" / "rank_report.json").read_text())
STARTED = "2026-12-05T16:19:44+00:00"


@dataclass
class Device:
    type: str = "cpu"


@dataclass
class Place:
    """A Collective (bench.collective) without a run: what a summary reads of the rank's place."""

    size: int = 1
    local_rank: int = 0
    backend: str = "ddp"
    rendezvous: dict | None = None
    device: Device = field(default_factory=Device)

    def allgather(self, obj) -> list:
        return [obj]


def config(tmp_path: Path, **kw) -> TrainConfig:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "images.bin").write_bytes(b"x" * 4096)
    return TrainConfig(workload="ssd", data=data, epochs=2, batch_size=4, sample_interval_s=0.2, **kw)


def test_a_recorded_rank_report_gives_a_valid_summary(tmp_path):
    summary = summarise(config(tmp_path), Place(), [copy.deepcopy(REPORT)], "done", STARTED)
    validate_summary(summary)
    assert list(summary)[:4] == ["schema_version", "valid", "status", "workload"]
    assert (summary["ranks"], summary["backend"], summary["device"], summary["rendezvous"]) == (1, "ddp", "cpu", None)
    assert summary["images_per_s"] == REPORT["images_per_s"] and summary["measured_steps"] == REPORT["steps_measured"]
    assert summary["epoch_time_s"] == pytest.approx(sum(m["seconds"] for m in REPORT["epoch_marks"]) / 2)
    assert summary["first_epoch_time_s"] == REPORT["epoch_marks"][0]["seconds"]
    storage = summary["storage"]
    assert storage["dataset_bytes"] == 4096 and storage["aggregate_ram_bytes"] == REPORT["ram_bytes"]
    assert storage["drop_caches"] == "done" and storage["bytes_source"] == "cachestat"
    assert storage["bandwidth_valid"] and storage["bandwidth_note"] == ""
    assert summary["utilisation"]["gpu_util"] is None and summary["utilisation"]["gpu_busy_note"] == "no GPU"
    losses = REPORT["losses"]
    assert summary["loss_first"] == pytest.approx(sum(losses[:3]) / 3)
    assert summary["loss_last"] == pytest.approx(sum(losses[-3:]) / 3)
    assert summary["started_at"] == STARTED and summary["environment"] == [REPORT["node_fingerprint"]]


def test_two_ranks_sum_rates_count_each_host_once_and_name_contention_once(tmp_path):
    note = "ranks 0 and 1 on vm share cores 1"
    first = copy.deepcopy(REPORT) | {"slot": REPORT["slot"] | {"contention": note}}
    second = copy.deepcopy(first) | {"rank": 1, "images_per_s": 5.0, "node_fingerprint": None}
    place = Place(size=2, backend="horovod", rendezvous={"host": "vm", "port": 1, "interface": "lo"})
    summary = summarise(config(tmp_path), place, [first, second], "done", STARTED)
    validate_summary(summary)
    assert summary["ranks"] == 2 and summary["hosts"] == ["vm"] and summary["rendezvous"]["port"] == 1
    assert summary["images_per_s"] == pytest.approx(REPORT["images_per_s"] + 5.0)
    assert summary["images_per_s_per_rank"] == [REPORT["images_per_s"], 5.0]
    assert summary["contention"] == note  # both ranks of the pair name it; the summary once
    assert summary["storage"]["aggregate_ram_bytes"] == REPORT["ram_bytes"]  # one host: its RAM once
    assert [r["rank"] for r in summary["per_rank"]] == [0, 1]


def test_synthetic_data_has_no_storage_figures(tmp_path):
    cfg = TrainConfig(workload="ssd", synthetic=True, epochs=2, batch_size=4, sample_interval_s=0.2)
    summary = summarise(cfg, Place(), [copy.deepcopy(REPORT)], "not_requested", STARTED)
    storage = summary["storage"]
    assert summary["loader"] == "synthetic" and storage["dataset_bytes"] == 0 and not storage["cache_risk"]
    assert storage["first_epoch_avg_read_mb_s"] is None and storage["bytes_source"] is None
    assert not storage["bandwidth_valid"] and storage["bandwidth_note"] == "no dataset read (synthetic data)"


def test_each_node_has_its_own_read_rate_images_and_collective_share(tmp_path):
    """Two nodes of one rank each, the second's rank a copy of the recorded one on another host with its
    samples' read counters halved: its node read half the bytes over the same window."""
    first = copy.deepcopy(REPORT)
    second = copy.deepcopy(REPORT) | {"rank": 1, "host": "node-b", "images_per_s": 5.0, "node_fingerprint": None}
    for sample in second["samples"]:
        for key in ("read_bytes", "dataset_cached_bytes", "dataset_read_bytes"):
            if isinstance(sample.get(key), int | float):
                sample[key] = sample[key] / 2
    for mark in second["epoch_marks"]:
        mark["read_bytes"] = mark["read_bytes"] / 2
    place = Place(size=2, rendezvous={"host": REPORT["host"], "port": 1, "interface": "lo"})
    summary = summarise(config(tmp_path), place, [first, second], "done", STARTED)
    validate_summary(summary)
    one, two = summary["nodes"]
    assert (one["host"], two["host"]) == (REPORT["host"], "node-b") and one["ranks"] == two["ranks"] == 1
    assert (one["img_s"], two["img_s"]) == (REPORT["images_per_s"], 5.0)
    assert one["comm_share"] == pytest.approx(REPORT["breakdown"]["comm_share"])
    assert one["read_mb_s"] > 0 and two["read_mb_s"] == pytest.approx(one["read_mb_s"] / 2, rel=0.05)
