"""Fuzzing the edges: every flag and config field refuses bad values with a message, never a crash,
and nothing a user typed reaches a shell (a marker file would appear)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cli import main
from bench.config.models import SweepConfig
from bench.config.types import HOST_RE, NAME_RE, PATH_RE, parse
from bench.errors import ConfigError

MARKER = Path("/tmp/scalewatch-fuzz-marker")
NASTY = st.sampled_from(
    [
        f"$(touch {MARKER})",
        f"`touch {MARKER}`",
        f"x; touch {MARKER}",
        f"x && touch {MARKER}",
        f"x | touch {MARKER}",
        "-oProxyCommand=touch /tmp/x",
        "a\nb",
        "",
        " ",
        "..",
        "ü",
        "%s%n",
    ]
)
TEXT = st.one_of(NASTY, st.text(max_size=30))
NUMBER = st.one_of(st.integers(-(10**12), 10**12), st.floats(allow_nan=True), st.text(max_size=5), st.none())


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, err.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts=st.lists(TEXT, max_size=3), partition=TEXT, path=TEXT, gpus=st.lists(NUMBER, max_size=4), launcher=TEXT)
def test_sweep_config_accepts_only_shell_inert_values(hosts, partition, path, gpus, launcher):
    fields = {
        "launcher": launcher,
        "hosts": [f"{h}:4" for h in hosts],
        "partition": partition,
        "gpus": gpus,
        "dataset_path": path,
        "output_dir": "/out",
        "train": {"workload": "ssd", "steps": 1, "data": "/d"},
    }
    try:
        cfg = parse(SweepConfig, fields)
    except ConfigError as error:
        assert str(error)  # refused with a message naming the field
        return
    assert all(HOST_RE.fullmatch(h.host) for h in cfg.where.hosts)
    assert cfg.where.partition is None or NAME_RE.fullmatch(cfg.where.partition)
    assert PATH_RE.fullmatch(str(cfg.data.dataset_path))
    assert all(isinstance(g, int) and g >= 1 for g in cfg.training.gpus)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=TEXT, size=TEXT, steps=TEXT, workload=TEXT, data=TEXT)
def test_train_flags_fuzzed_are_refused_with_exit_2(batch, size, steps, workload, data):
    code, err = run_cli(
        [
            "train",
            "--workload",
            workload,
            "--data",
            data or "/nonexistent",
            "--batch-size",
            batch,
            "--image-size",
            size,
            "--steps",
            steps,
        ]
    )
    assert code == 2, err
    assert err.strip() and "Traceback" not in err
    assert not MARKER.exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=TEXT, workloads=TEXT, images=TEXT)
def test_sweep_flags_fuzzed(gpus, workloads, images, tmp_path_factory):
    out = tmp_path_factory.mktemp("fz")
    config = out / "c.json"
    config.write_text(json.dumps({"dataset_path": str(out / "d")}))
    flags = ["--gpus", gpus, "--workloads", workloads, "--dataset-images", images, "--output-dir", str(out)]
    code, err = run_cli(["sweep", "--config", str(config), "--results-url", f"sqlite:///{out}/r.db", *flags])
    assert code == 2, err
    assert "Traceback" not in err
    assert not MARKER.exists()


@pytest.mark.parametrize(
    "flag,value,needle",
    [
        ("--batch-size", "0", "batch_size"),
        ("--image-size", "10", "image_size"),
        ("--steps", "-5", "steps"),
        ("--lr", "-1", "lr"),
        ("--sample-interval", "0", "sample_interval"),
    ],
)
def test_train_flag_errors_name_the_flag(flag, value, needle):
    code, err = run_cli(
        ["train", "--workload", "ssd", "--synthetic", flag, value] + ([] if flag == "--steps" else ["--steps", "1"])
    )
    assert code == 2 and needle in err


def test_a_flag_prefix_is_refused_not_guessed(tmp_path):
    """`--gpu 1` must not run as `--gpus 1`: argparse's prefix matching is off."""
    import subprocess

    from tests.conftest import BENCH

    done = subprocess.run([BENCH, "sweep", "--gpu", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unrecognized arguments: --gpu 1" in done.stderr, done.stderr
    assert not (tmp_path / "scalewatch-home").exists()
