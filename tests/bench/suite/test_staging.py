"""Staging takes a spec of its own (issue 52): the datasets' settings, nothing of a run. stage_node once
built a TrainConfig for an 'ssd' run with its output_dir set to the dataset folder to fill SweepConfig's
required fields."""

from __future__ import annotations

import pytest

from bench.config.models import SweepConfig, TrainConfig
from bench.suite.stage_node import main, node_argv
from bench.suite.staging import StagingSpec


def test_the_spec_is_the_suites_dataset_settings_and_the_node_argv_carries_only_them(tmp_path):
    train = TrainConfig(workload="ssd", synthetic=True, steps=1, seed=7)
    cfg = SweepConfig(
        workloads=["ssd"], dataset_path=tmp_path / "data", dataset_images=12, output_dir=tmp_path / "runs", train=train
    )
    spec = StagingSpec.of(cfg)
    assert spec.model_dump() == {
        "workloads": ("ssd",),
        "dataset_path": tmp_path / "data",
        "dataset_images": 12,
        "seed": 7,
        "stage_from": None,
    }
    argv = node_argv(spec, "/usr/bin/python3")
    assert str(tmp_path / "runs") not in argv and "--images" in argv and argv[argv.index("--seed") + 1] == "7"


def test_the_node_refuses_a_bad_spec_naming_the_field(tmp_path, capsys):
    base = ["--dataset-path", str(tmp_path), "--images", "4", "--seed", "0"]
    assert main([*base, "--workload", "nosuch"]) == 2
    assert "workload 'nosuch' is not a built-in" in capsys.readouterr().err
    assert main(["--dataset-path", str(tmp_path), "--images", "0", "--seed", "0", "--workload", "ssd"]) == 2
    assert "dataset_images" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unique"):
        StagingSpec(workloads=["ssd", "ssd"], dataset_path=tmp_path)
