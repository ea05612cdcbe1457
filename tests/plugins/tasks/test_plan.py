"""The plan's config flows one way: validated once by validate_config, decoded (never validated) downstream.

scalewatch imports Airflow: imported inside the tests, after the DAG tests' fixture has set AIRFLOW_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config import AlertTargets, HostSlots, SweepConfig, Thresholds, TrainConfig


def _every_kind_of_field(tmp_path: Path) -> SweepConfig:
    """Nested models, a tuple of models, an int-keyed table, paths, a byte size, unions and literals."""
    data = str(tmp_path / "data")
    return SweepConfig(
        workloads=("ssd", "deeplabv3plus"),
        gpus=(1, 2, 4),
        launcher="ssh",
        hosts=(HostSlots.parse("node-a:2"), HostSlots.parse("node-b:2")),
        dataset_path=data,
        stage_from="/srv/images",
        output_dir=str(tmp_path / "runs"),
        train=TrainConfig(workload="ssd", data=data, steps=4, precision="bf16"),
        thresholds=Thresholds(min_scaling_efficiency_by_gpus={2: 0.9, 4: 1}, min_gpu_util=50),
        alerts=AlertTargets(slack_conn_id="sw_slack", email_to=("oncall@example.com",)),
        storage_cache_bytes="2GiB",
    )


def test_a_dumped_config_decodes_to_the_config_that_validated(tmp_path):
    from scalewatch.tasks.plan import sweep_config

    cfg = _every_kind_of_field(tmp_path)
    back = sweep_config({"sweep": cfg.model_dump(mode="json")})
    assert back == cfg and back == SweepConfig.model_validate(cfg.model_dump(mode="json"))
    assert back.model_dump(mode="json") == cfg.model_dump(mode="json")
    assert isinstance(back.dataset_path, Path) and isinstance(back.hosts[0].slots, int) and back.hosts[0].host
    assert back.thresholds.scaling_bound(3) == cfg.thresholds.scaling_bound(3) == 1.0
    assert isinstance(back.workloads, tuple) and back.storage_cache_bytes == 2 * 2**30


def test_decoding_runs_no_validator(tmp_path):
    """amp without precision validates; a second validation of its dump (precision now given) would not."""
    from scalewatch.tasks.plan import from_validated

    data = str(tmp_path / "data")
    cfg = SweepConfig(
        dataset_path=data, output_dir=str(tmp_path), train=TrainConfig(workload="ssd", data=data, steps=2, amp=True)
    )
    dump = cfg.model_dump(mode="json")
    with pytest.raises(ValueError, match="amp/precision"):
        SweepConfig.model_validate(dump)
    assert from_validated(SweepConfig, dump) == cfg


def test_a_dump_missing_a_field_is_refused_never_defaulted(tmp_path):
    from scalewatch.tasks.plan import from_validated

    dump = _every_kind_of_field(tmp_path).model_dump(mode="json")
    del dump["time_limit_s"]
    with pytest.raises(ValueError, match=r"missing \['time_limit_s'\]"):
        from_validated(SweepConfig, dump)
    with pytest.raises(ValueError, match=r"unknown \['gpu'\]"):
        from_validated(SweepConfig, {**dump, "time_limit_s": 60, "gpu": [1]})
