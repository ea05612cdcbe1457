"""Form values that would exhaust the worker are refused at the edge, naming the field and the limit."""

from __future__ import annotations

import pytest

from bench.config.models import SweepConfig, TrainConfig
from bench.config.types import parse
from bench.data.generate import GenerateSpec, generate
from bench.errors import ConfigError, LaunchError
from bench.launch.registry import build_launcher
from bench.suite.plan import run_spec


def sweep(tmp_path, **over) -> SweepConfig:
    fields = {
        "dataset_path": str(tmp_path / "d"),
        "output_dir": str(tmp_path / "o"),
        "train": {"workload": "ssd", "steps": 2, "data": str(tmp_path / "d")},
    }
    return parse(SweepConfig, fields | over)


def test_thousands_of_local_ranks_are_refused_before_launch(tmp_path):
    launcher = build_launcher("local")
    cfg = sweep(tmp_path, gpus=[4096])
    with pytest.raises(LaunchError, match=r"host localhost: 4096 ranks asked, but it has \d+ slot"):
        launcher.submit(run_spec(cfg, "r", "ssd", 4096))
    forced = sweep(tmp_path, gpus=[4096], oversubscribe=True)
    with pytest.raises(LaunchError, match=r"more than 4 per core, even with oversubscribe"):
        launcher.submit(run_spec(forced, "r", "ssd", 4096))
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("spec.json"))


def test_a_dataset_larger_than_the_disk_or_memory_is_refused_before_writing(tmp_path):
    with pytest.raises(ConfigError, match=r"dataset_images: 100000000 coco images need about [\d.]+ GB"):
        generate(GenerateSpec("coco", tmp_path / "big", images=100_000_000))
    assert not (tmp_path / "big").exists()


def test_an_impossible_batch_is_refused_naming_both_fields():
    with pytest.raises(
        ConfigError, match=r"batch_size/image_size: a 4096 x 3 x 2048\^2 float32 input batch is 192\.0 GiB"
    ):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 1, "batch_size": 4096, "image_size": 2048})
    parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 1, "batch_size": 64, "image_size": 300})
