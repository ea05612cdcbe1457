"""docs/one-setting.md, walked with real objects: `image_size` from the form's Params to the model a rank
validates from its run folder's train.json, with each step the page names (the edge's refusal, the plan
XCom's JSON, the scale's RunSpec, the rank's `bench train --spec`, the history key)."""

from __future__ import annotations

import json

import pytest

from bench.analysis.frame import config_key
from bench.cli import build_parser
from bench.cli.train import train_config
from bench.errors import ConfigError
from bench.launch.supervisor import rank_argv
from bench.launch.train_spec import write_train_spec
from bench.suite.plan import run_spec
from scalewatch.params import params, settings_from_params
from scalewatch.tasks.plan import plan_sweep, sweep_config


def test_image_size_from_the_form_to_the_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALEWATCH_HOME", str(tmp_path / "home"))
    # 1-2: the form's Param carries the one definition's default and limits
    form = params()
    param = form["image_size"]
    assert (param.value, param.schema["minimum"], param.schema["maximum"]) == (128, 32, 2048)
    values = {name: p.value for name, p in form.items()}
    # 3: the edge refuses a bad value naming the field and its limit
    with pytest.raises(ConfigError, match=r"image_size: .*greater than or equal to 32"):
        settings_from_params(values, {"image_size": 16})
    settings = settings_from_params(values, {"image_size": 96, "workloads": ["ssd"]})
    # 4: the internal view is the same value, in SweepConfig's TrainConfig
    cfg = settings.sweep_config(tmp_path / "home", tmp_path / "out")
    assert cfg.train.image_size == 96
    # 5-6: through the plan XCom as JSON, validated again by the same model in a later task
    plan = json.loads(json.dumps({"sweep": plan_sweep(cfg)}))
    again = sweep_config(plan)
    assert again == cfg
    # 7: the scale's RunSpec
    spec = run_spec(again, "walk", "ssd", 2)
    assert spec.train.image_size == 96
    # 8-9: the file the launcher writes, and the model the rank's `bench train --spec` validates from it
    spec.output_dir.mkdir(parents=True)
    path = write_train_spec(spec)
    assert json.loads(path.read_text())["image_size"] == 96
    argv = rank_argv(spec, "python3")
    rank_args = argv[argv.index("--") + 1 :]
    rank = train_config(build_parser().parse_args(["train", *rank_args, "--backend", "ddp"]))
    assert rank.image_size == 96 and rank.workload == "ssd" and rank.backend == "ddp"
    # 11: the history key tells a 96-pixel run from a 128-pixel one
    default = settings_from_params(values, {"workloads": ["ssd"]}).sweep_config(tmp_path / "home", tmp_path / "out")
    assert config_key(again) != config_key(default)
