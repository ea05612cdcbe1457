import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.config.models import HostSlots, RunSpec, SweepConfig, TrainConfig
from bench.config.types import parse
from bench.errors import ConfigError

SHELL = [
    "a;touch /tmp/pwned",
    "$(reboot)",
    "`id`",
    "a b",
    "x|y",
    "../etc",
    "a&&b",
    "host\nname",
    "-oProxyCommand=x",
]


def sweep(**over) -> dict:
    base = {
        "dataset_path": "/data/x",
        "output_dir": "/out",
        "train": {"workload": "ssd", "steps": 2, "data": "/data/x"},
    }
    return base | over


def test_error_names_field_and_allowed_values():
    with pytest.raises(ConfigError) as err:
        parse(SweepConfig, sweep(launcher="kubernetes"))
    assert "launcher" in str(err.value) and "'local'" in str(err.value) and "'slurm'" in str(err.value)


@pytest.mark.parametrize("gpus", [[0], [-1], [], [2, 2]])
def test_bad_gpu_lists_refused(gpus):
    with pytest.raises(ConfigError, match="gpus"):
        parse(SweepConfig, sweep(gpus=gpus))


@pytest.mark.parametrize("bad", SHELL)
def test_shell_metacharacters_refused_in_hosts_partitions_paths(bad):
    with pytest.raises(ConfigError, match=r"^where\.hosts\.0: "):
        parse(SweepConfig, sweep(launcher="ssh", hosts=[bad]))
    with pytest.raises(ConfigError):
        parse(SweepConfig, sweep(partition=bad))
    if not bad.startswith("-"):  # a leading dash inside a path is only a name, and always quoted
        with pytest.raises(ConfigError):
            parse(SweepConfig, sweep(dataset_path="/data/" + bad))


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_accepted_host_is_shell_inert(text):
    try:
        host = HostSlots(host=text)
    except ValueError:
        return
    assert all(c.isalnum() or c in ".-" for c in host.host)


def test_train_needs_data_or_synthetic_and_steps_xor_epochs():
    with pytest.raises(ConfigError, match="data"):
        parse(TrainConfig, {"workload": "ssd", "steps": 1})
    with pytest.raises(ConfigError, match="steps/epochs"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True})
    with pytest.raises(ConfigError, match="steps/epochs"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 1, "epochs": 1})


def test_a_warm_cache_run_neither_evicts_nor_skips_the_dataset():
    ok = parse(TrainConfig, {"workload": "ssd", "data": "/d", "steps": 1, "warm_cache": True, "drop_caches": False})
    # as a rank reads it back from its train.json (the fields given, and only those, travel)
    rank = TrainConfig.model_validate_json(ok.model_dump_json(exclude_unset=True))
    assert rank.warm_cache is True and rank.drop_caches is False and rank == ok
    with pytest.raises(ConfigError, match=r"warm_cache: .*drop_caches and synthetic false"):
        parse(TrainConfig, {"workload": "ssd", "data": "/d", "steps": 1, "warm_cache": True})
    with pytest.raises(ConfigError, match="warm_cache"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 1, "warm_cache": True, "drop_caches": False})


def test_ssh_ranks_must_fit_slots():
    with pytest.raises(ConfigError, match="exceed"):
        parse(SweepConfig, sweep(launcher="ssh", hosts=["h1:1"], gpus=[1, 4]))


def test_ssh_config_is_an_absolute_path_for_a_launcher_that_runs_ssh_and_a_readable_file(tmp_path):
    """The suite's ssh config file (ssh -F): refused naming the field where no ssh runs, where the path
    is relative or shell-active, and where the file cannot be read when the launcher is built."""
    from bench.launch.registry import suite_launcher

    with pytest.raises(ConfigError, match="ssh_config: launcher local runs no ssh; allowed with launcher ssh"):
        parse(SweepConfig, sweep(ssh_config=str(tmp_path / "c")))
    with pytest.raises(ConfigError, match="ssh_config: launcher slurm without conn_id runs no ssh"):
        parse(SweepConfig, sweep(launcher="slurm", ssh_config=str(tmp_path / "c")))
    parse(SweepConfig, sweep(launcher="slurm", conn_id="login", ssh_config=str(tmp_path / "c")))
    for bad in ("relative/config", "/x/$(id)"):
        with pytest.raises(ConfigError, match="ssh_config"):
            parse(SweepConfig, sweep(launcher="ssh", hosts=["h1:2"], ssh_config=bad))
    cfg = parse(SweepConfig, sweep(launcher="ssh", hosts=["h1:2"], ssh_config=str(tmp_path / "c")))
    with pytest.raises(ConfigError, match=f"ssh_config: {tmp_path / 'c'} is not a readable file"):
        suite_launcher(cfg)
    (tmp_path / "c").write_text("Host h1\n  User alice\n")
    argv = suite_launcher(cfg).ssh.argv("h1", "true")
    assert argv[argv.index("-F") + 1] == str(tmp_path / "c")


def test_run_spec_env_and_directives_are_checked():
    train = TrainConfig(workload="ssd", synthetic=True, steps=1)
    with pytest.raises(ValueError, match="env value"):
        RunSpec(run_id="r", train=train, ranks=1, output_dir=Path("/o"), env={"A": "x;y"})
    with pytest.raises(ValueError, match="sbatch directive"):
        RunSpec(run_id="r", train=train, ranks=1, output_dir=Path("/o"), sbatch_directives=("--wrap=rm -rf /",))


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"checkpoint": "on"}, r"^checkpoint: 'on' is not one of off, model"),
        ({"checkpoint": {"bytes_per_rank": "512KiB"}}, r"^checkpoint: bytes_per_rank: .*greater than or equal"),
        ({"checkpoint": {"bytes_per_rank": "4MiB", "writes": 0}}, r"^checkpoint: writes: .*greater than or equal"),
        ({"checkpoint": {"bytes_per_rank": "4MiB", "flush": 1}}, r"^checkpoint: flush: Extra inputs"),
        ({"checkpoint": {"writes": 2}}, r"^checkpoint: bytes_per_rank: required when checkpoint is a size"),
        ({"checkpoint_every_steps": -1}, r"^checkpoint_every_steps: .*greater than or equal to 0"),
        ({"min_checkpoint_efficiency": 1.6}, r"^min_checkpoint_efficiency: .*less than or equal to 1.5"),
    ],
)
def test_bad_checkpoint_settings_are_refused_naming_the_field(values, named):
    from bench.config.settings import settings_from

    with pytest.raises(ConfigError, match=named):
        settings_from(values)


def test_the_checkpoint_setting_reaches_the_scales_own_runs_only(tmp_path):
    """Off by default (no flag, nothing in TrainConfig); set, the scale's run and its second run carry it, on the
    store under test, and the reruns that take storage out or measure the node do not."""
    from bench.config.settings import settings_from
    from bench.launch.train_spec import spec_text
    from bench.suite.plan import INDEPENDENT, run_spec

    off = settings_from({}).sweep_config(tmp_path, tmp_path / "out")
    rank = json.loads(spec_text(run_spec(off, "r", "ssd", 2)))  # what the rank reads (train.json)
    assert off.checkpointing.spec is None and not any(v for k, v in rank.items() if k.startswith("checkpoint")), rank
    values = {"checkpoint": {"bytes_per_rank": "4MiB", "writes": 1, "reads": 1}, "checkpoint_every_steps": 5}
    cfg = settings_from(values).sweep_config(tmp_path, tmp_path / "out")
    for variant, carried in (("", True), ("repeat", True), (INDEPENDENT, False), ("warm", False)):
        train = run_spec(cfg, "r", "ssd", 2, variant).train
        assert (train.checkpoint is not None, train.checkpoint_every_steps == 5) == (carried, carried)
    rank = json.loads(spec_text(run_spec(cfg, "r", "ssd", 2)))
    assert rank["checkpoint"]["bytes_per_rank"] == 4 << 20, rank
    assert rank["checkpoint_dir"] == str(cfg.data.dataset_path) and rank["checkpoint_every_steps"] == 5


def test_every_cpus_per_rank_the_settings_take_reaches_the_rank_as_its_loader_threads(tmp_path):
    """The suite gives a rank one loader thread per core it owns: a setting the form takes (up to 256) is
    never refused later naming train.loader_threads, a field the user never set."""
    from bench.config.models import SETTING_FIELDS
    from bench.config.settings import settings_from

    top = SETTING_FIELDS["cpus_per_rank"].metadata
    most = next(m.le for m in top if getattr(m, "le", None) is not None)
    cfg = settings_from({"cpus_per_rank": most}).sweep_config(tmp_path, tmp_path / "out")
    assert cfg.train.loader_threads == most == 256
