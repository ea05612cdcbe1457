"""The plan's config flows one way: validated once by validate_config, decoded (never validated) downstream.

scalewatch imports Airflow: imported inside the tests, after the DAG tests' fixture has set AIRFLOW_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.models import AlertTargets, SweepConfig, Thresholds, TrainConfig


def _every_kind_of_field(tmp_path: Path) -> SweepConfig:
    """Nested models, a tuple of models, an int-keyed table, paths, a byte size, unions and literals."""
    data = str(tmp_path / "data")
    return SweepConfig(
        workloads=("ssd", "deeplabv3plus"),
        gpus=(1, 2, 4),
        launcher="ssh",
        hosts=("node-a:2", "node-b:2"),
        dataset_path=data,
        stage_from="/srv/images",
        output_dir=str(tmp_path / "runs"),
        train=TrainConfig(workload="ssd", data=data, steps=4, precision="bf16"),
        bounds=Thresholds(min_scaling_efficiency_by_gpus={2: 0.9, 4: 1}, min_gpu_util=50),
        alerts=AlertTargets(slack_conn_id="sw_slack", email_to=("oncall@example.com",)),
        storage_cache="2GiB",
    )


def test_a_dumped_config_decodes_to_the_config_that_validated(tmp_path):
    from scalewatch.tasks.plan import sweep_config

    cfg = _every_kind_of_field(tmp_path)
    back = sweep_config({"sweep": cfg.model_dump(mode="json")})
    assert back == cfg and back == SweepConfig.model_validate(cfg.model_dump(mode="json"))
    assert back.model_dump(mode="json") == cfg.model_dump(mode="json")
    assert (
        isinstance(back.data.dataset_path, Path)
        and isinstance(back.where.hosts[0].slots, int)
        and back.where.hosts[0].host
    )
    assert back.bounds.scaling_bound(3) == cfg.bounds.scaling_bound(3) == 1.0
    assert isinstance(back.training.workloads, tuple) and back.data.storage_cache_bytes == 2 * 2**30


def test_the_plan_validates_to_the_config_that_validated_and_again_to_the_same(tmp_path):
    """Each task validates the plan's config once, with the same model (issue 52: a homemade decoder ran no
    validator, since a full dump of amp without precision failed TrainConfig's amp/precision rule when
    validated again). The plan carries what differs from the defaults, so validating it gives the config
    back, and validating that again gives the same: every kind of field, amp, a checkpoint size."""
    from scalewatch.tasks.plan import plan_sweep, sweep_config

    data = str(tmp_path / "data")
    amp = SweepConfig(
        dataset_path=data, output_dir=str(tmp_path), train=TrainConfig(workload="ssd", data=data, steps=2, amp=True)
    )
    sized = SweepConfig(
        dataset_path=data,
        output_dir=str(tmp_path),
        train=TrainConfig(workload="ssd", data=data, steps=2),
        checkpoint={"bytes_per_rank": "1MiB", "writes": 2},
    )
    for cfg in (_every_kind_of_field(tmp_path), amp, sized):
        back = sweep_config({"sweep": plan_sweep(cfg)})
        assert back == cfg and plan_sweep(back) == plan_sweep(cfg)
        assert sweep_config({"sweep": plan_sweep(back)}) == cfg
    from bench.suite.plan import run_spec

    assert run_spec(amp, "r1", "ssd", 1).train.amp  # a scale's TrainConfig is validated from it alike
    with pytest.raises(ValueError, match="amp/precision"):  # the rule still holds where fp32 is given
        TrainConfig(workload="ssd", data=data, steps=2, amp=True, precision="fp32")


def test_a_plan_changed_on_its_way_is_refused_naming_the_field(tmp_path):
    """The plan is validated, not trusted: an unknown key or a value out of its limits (an XCom edited
    between tasks) is refused as the edge refuses it; a default left out is the model's own."""
    from bench.errors import ConfigError
    from scalewatch.tasks.plan import plan_sweep, sweep_config

    dump = plan_sweep(_every_kind_of_field(tmp_path))
    with pytest.raises(ConfigError, match=r"plan\.sweep\.gpu: Extra inputs are not permitted"):
        sweep_config({"sweep": {**dump, "gpu": [1]}})
    with pytest.raises(ConfigError, match=r"plan\.sweep\.time_limit_s: Input should be greater than or equal to 10"):
        sweep_config({"sweep": {**dump, "time_limit_s": 1}})
    assert (
        "time_limit_s" not in dump["where"]
        and sweep_config({"sweep": dump}).where.time_limit_s
        == SweepConfig(
            dataset_path=tmp_path, output_dir=tmp_path, train=TrainConfig(workload="ssd", synthetic=True, steps=1)
        ).where.time_limit_s
    )


# What validate_config wrote before the run's config held the setting groups (issue 52), for the settings
# below: plan_sweep's output of the code of that time, verbatim, and the key its series was stored under.
BEFORE_GROUPS = {
    "alerts": {"email_to": ["a@example.org"]},
    "ceilings": False,
    "checkpoint": {"bytes_per_rank": 4194304, "mode": "size", "reads": 1, "writes": 2},
    "dataset_path": "/home/sw/data",
    "hosts": [{"host": "n1", "slots": 2}, {"host": "n2"}],
    "launcher": "ssh",
    "output_dir": "/home/sw/runs",
    "ranks_per_node": 2,
    "storage_cache_bytes": 2147483648,
    "thresholds": {"min_scaling_efficiency": 0.6},
    "train": {
        "checkpoint": None,
        "data": "/home/sw/data",
        "image_size": 128,
        "loader_threads": 1,
        "min_measure_s": 10.0,
        "sample_interval_s": 0.25,
        "steps": 20,
        "workload": "ssd",
    },
}
BEFORE_GROUPS_SETTINGS = {
    "launcher": "ssh",
    "hosts": ["n1:2", "n2"],
    "storage_cache": "2GiB",
    "min_scaling_efficiency": 0.6,
    "checkpoint": {"bytes_per_rank": "4MiB", "writes": 2, "reads": 1},
    "ranks_per_node": 2,
    "ceilings": False,
    "email_to": ["a@example.org"],
}


def test_a_plan_written_before_the_groups_is_read_as_the_same_run():
    """A run in flight across the upgrade (or an old run's task cleared and run again) reads its plan as the
    config it was: the same groups, the same typed values, the same history key."""
    from bench.analysis.frame import config_key
    from bench.config.settings import settings_from
    from scalewatch.tasks.plan import sweep_config

    back = sweep_config({"sweep": BEFORE_GROUPS})
    now = settings_from(BEFORE_GROUPS_SETTINGS).sweep_config("/home/sw", "/home/sw/runs")
    for group in ("training", "where", "probe", "checkpointing", "bounds", "alerts"):
        assert getattr(back, group) == getattr(now, group), group
    assert back.data.storage_cache_bytes == now.data.storage_cache_bytes == 2 * 2**30
    assert back.data.dataset_path == now.data.dataset_path and back.train == now.train
    assert config_key(back) == config_key(now) == "tiny/dali/bs8/img128/amp0/ssh#fd8f1f1efc6f"
