"""A rank's settings travel as the worker's TrainConfig in JSON (`train.json`, bench.launch.train_spec)
and are validated again by the same model in the rank: the same model comes out, the file is read only
as the launcher wrote it, and `bench train --spec` refuses what would mix two sources."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.cli import build_parser
from bench.cli.train import train_config
from bench.config.models import TrainConfig
from bench.config.settings import settings_from
from bench.errors import ConfigError
from bench.launch.supervisor import rank_argv
from bench.launch.train_spec import (
    heredoc,
    rank_train_config,
    read_train_spec,
    spec_sha256,
    spec_text,
    write_train_spec,
)
from bench.suite.plan import INDEPENDENT, run_spec

SETTINGS = (
    {},
    {"checkpoint": {"bytes_per_rank": "4MiB", "writes": 1, "reads": 1}, "checkpoint_every_steps": 5},
    {"checkpoint": "model", "precision": "bf16"},
    {"workloads": ["ssd"], "min_measure_s": 0, "image_size": 96, "loader": "dali", "steps": 7, "warmup_steps": 3},
)


def specs(tmp_path):
    for i, values in enumerate(SETTINGS):
        cfg = settings_from(values).sweep_config(tmp_path / "data", tmp_path / f"out{i}")
        for variant in ("", INDEPENDENT, "warm"):
            yield run_spec(cfg, f"r{i}", "ssd", 2, variant)


def test_every_scales_settings_come_back_as_the_same_model_with_the_same_fields_given(tmp_path):
    for spec in specs(tmp_path):
        spec.output_dir.mkdir(parents=True, exist_ok=True)
        sent = rank_train_config(spec)
        got = read_train_spec(write_train_spec(spec))
        assert got == sent and got.model_fields_set == sent.model_fields_set, spec.run_id
        assert got.metrics_out == spec.output_dir / "metrics"
        # and the rank wrapper's command names that file and its digest, no setting of its own
        argv = rank_argv(spec, sys.executable)
        path = spec.output_dir / "train.json"
        assert argv[argv.index("--") + 1 :] == ["--spec", str(path), "--spec-sha256", spec_sha256(spec)]
        assert read_train_spec(path, spec_sha256(spec)) == sent


def test_the_batch_scripts_heredoc_writes_the_same_json_through_a_real_shell(tmp_path):
    """Slurm's batch script may reach the cluster through a login node, so it writes the file itself;
    the JSON's quotes and braces are the shell's to leave alone."""
    cfg = settings_from({"workloads": ["ssd"]}).sweep_config(tmp_path / "data", tmp_path / "out")
    spec = run_spec(cfg, "r", "ssd", 2)
    spec.output_dir.mkdir(parents=True)
    # a link planted at the name while the job queued: replaced, never written through
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, spec.output_dir / "train.json")
    subprocess.run(["sh", "-c", heredoc(spec)], check=True)
    assert victim.read_text() == "keep\n" and not (spec.output_dir / "train.json").is_symlink()
    written = (spec.output_dir / "train.json").read_text()
    assert written == spec_text(spec) + "\n"
    assert read_train_spec(spec.output_dir / "train.json", spec_sha256(spec)) == rank_train_config(spec)
    assert sorted(p.name for p in spec.output_dir.iterdir()) == ["train.json"]  # no temporary file left


def test_bench_train_spec_refuses_flags_beside_it_a_link_and_a_bad_file(tmp_path):
    spec = run_spec(settings_from({}).sweep_config(tmp_path / "data", tmp_path / "out"), "r", "ssd", 2)
    spec.output_dir.mkdir(parents=True)
    path = write_train_spec(spec)

    def config(*argv):
        return train_config(build_parser().parse_args(["train", "--spec", str(path), *argv]))

    assert config("--backend", "ddp").backend == "ddp"  # the one flag the rank wrapper adds
    assert config().backend == spec.train.backend
    with pytest.raises(ConfigError, match=r"--spec: .*--steps, --workload given beside it"):
        config("--workload", "ssd", "--steps", "3")
    victim = tmp_path / "victim.json"
    victim.write_text(path.read_text())
    path.unlink()
    os.symlink(victim, path)
    with pytest.raises(ConfigError, match=r"--spec: .*link"):
        config()
    path.unlink()
    path.write_text('{"workload": "ssd", "synthetic": true, "steps": -1}')
    with pytest.raises(ConfigError, match=r"--spec .*train.json: steps: .*greater than or equal to 1"):
        config()
    path.write_text("steps: 1")
    with pytest.raises(ConfigError, match="is not JSON"):
        config()
    with pytest.raises(ConfigError, match="does not exist"):
        train_config(build_parser().parse_args(["train", "--spec", str(tmp_path / "none.json")]))
    # a file swapped in after the launcher wrote it (a shared run folder): the digest on the command line refuses it
    path.write_text(spec_text(spec).replace('"ssd"', '"deeplabv3plus"') + "\n")
    with pytest.raises(ConfigError, match=r"--spec: .*train.json is not the file its launcher wrote"):
        config("--spec-sha256", spec_sha256(spec))
    path.write_text(spec_text(spec) + "\n")
    assert config("--spec-sha256", spec_sha256(spec)) == config()
    with pytest.raises(ConfigError, match=r"--spec-sha256: checks a --spec file; give --spec too"):
        train_config(build_parser().parse_args(["train", "--workload", "ssd", "--spec-sha256", "0" * 64]))
    with pytest.raises(SystemExit):  # argparse: not a sha256
        build_parser().parse_args(["train", "--spec", str(path), "--spec-sha256", "abc"])
    # any other OSError is named too, not a traceback in the rank's log (root reads past permissions here,
    # so the error is a path through a file: ENOTDIR)
    with pytest.raises(ConfigError, match=r"--spec: .*victim.json/train.json cannot be read \(Not a directory\)"):
        train_config(build_parser().parse_args(["train", "--spec", str(victim / "train.json")]))


def test_a_person_typing_flags_still_gets_the_models_defaults():
    """No flag holds a default of its own: what was not typed is the model's default, and not "given"."""
    got = train_config(build_parser().parse_args(["train", "--workload", "ssd", "--synthetic", "--steps", "2"]))
    assert got == TrainConfig(workload="ssd", synthetic=True, steps=2)
    assert got.model_fields_set == {"workload", "synthetic", "steps"}
    with pytest.raises(ConfigError, match="--workload: Field required"):
        train_config(build_parser().parse_args(["train", "--synthetic", "--steps", "2"]))


def test_a_rank_reads_the_slurm_rendezvous_file_but_not_through_a_planted_link(tmp_path):
    """The file holds the job's address, port, backend and secret: a link planted at its name in a shared run
    folder would point the ranks at someone else's rendezvous."""
    from bench.launch.rank import read_rendezvous_file

    real = tmp_path / "rendezvous.addr"
    real.write_text("10.0.0.1 29500 ddp s3cret\n")
    assert read_rendezvous_file(real).split() == ["10.0.0.1", "29500", "ddp", "s3cret"]
    theirs = tmp_path / "theirs.addr"
    theirs.write_text("10.6.6.6 29500 ddp known\n")
    planted = tmp_path / "planted.addr"
    os.symlink(theirs, planted)
    with pytest.raises(SystemExit, match=r"rendezvous file .*planted.addr: .*link.*; refused"):
        read_rendezvous_file(planted)
