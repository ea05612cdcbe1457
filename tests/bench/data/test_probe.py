"""The storage probe against real fio on a staged dataset, with a real cgroup-v1 blkio throttle."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.data.generate import GenerateSpec, generate
from bench.data.probe import ProbeError, ProbeSettings, fitted_block_size, probe
from bench.data.stage import stage
from bench.errors import DatasetError
from tests.conftest import BENCH
from tests.infra.faults import blkio_read_throttle


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe")
    generate(GenerateSpec("coco", root / "src", images=120, min_side=600, max_side=800, seed=3))
    stage(root / "src", root / "staged")
    return root / "staged"


def cli(*args: str, prefix: str = "") -> subprocess.CompletedProcess:
    cmd = [BENCH, "storage", "probe", *args]
    if prefix:
        cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_probe_climbs_parallelism_and_reports_a_ceiling(staged):
    done = cli("--path", str(staged), "--max-jobs", "4", "--seconds", "1", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [lv["jobs"] for lv in doc["levels"]][:2] == [1, 2]
    assert doc["ceiling_mb_s"] == max(lv["mb_s"] for lv in doc["levels"]) > 0
    assert all(lv["seconds"] >= 0.9 for lv in doc["levels"])  # time-based: each level sustained
    assert doc["conclusive"] is True and doc["method"] == "direct"
    assert doc["sample_files"] >= 120 and doc["fio_version"].startswith("fio-")


def test_block_size_fits_the_files():
    assert fitted_block_size([70_000, 90_000, 120_000]) == 65536
    assert fitted_block_size([100]) == 4096
    assert fitted_block_size([50_000_000]) == 1 << 20


def test_a_path_that_is_not_a_staged_dataset_is_refused(tmp_path):
    (tmp_path / "x.jpg").write_bytes(b"\xff" * 10_000)
    done = cli("--path", str(tmp_path), "--json")
    assert done.returncode == 2
    assert f"--path {tmp_path}" in done.stderr and "not a staged dataset" in done.stderr
    with pytest.raises(DatasetError):
        probe([tmp_path])


def test_fio_missing_or_failing_is_a_probe_error(staged, tmp_path):
    with pytest.raises(ProbeError, match="fio not found"):
        probe([staged], ProbeSettings(fio=str(tmp_path / "no-fio")))
    failing = tmp_path / "fio"
    failing.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo fio-x && exit 0\necho 'boom' >&2; exit 3\n")
    failing.chmod(0o755)
    with pytest.raises(ProbeError, match="exit 3"):
        probe([staged], ProbeSettings(fio=str(failing)))


def test_bad_flags_exit_2_naming_them(staged):
    for args, named in ((["--max-jobs", "0"], "--max-jobs"), (["--seconds", "0.1"], "--seconds")):
        done = cli("--path", str(staged), *args)
        assert done.returncode == 2 and named in done.stderr


@pytest.mark.slow
def test_ceiling_matches_a_blkio_throttle(staged):
    rate = 16 * 1024 * 1024
    with blkio_read_throttle(staged, rate) as prefix:
        done = cli("--path", str(staged), "--max-jobs", "4", "--seconds", "3", "--json", prefix=prefix)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    # the throttle is the storage's ceiling now, whatever the parallelism
    assert doc["ceiling_mb_s"] == pytest.approx(rate / 1e6, rel=0.10)
    assert all(lv["mb_s"] <= rate / 1e6 * 1.10 for lv in doc["levels"])


def test_a_dataset_of_many_files_is_sampled_within_what_fio_accepts(tmp_path):
    generate(GenerateSpec("coco", tmp_path / "src", images=900, min_side=48, max_side=64, seed=4))
    stage(tmp_path / "src", tmp_path / "staged")
    result = probe([tmp_path / "staged"], ProbeSettings(max_jobs=2, seconds=1))
    assert result.ceiling_mb_s > 0 and result.sample_files == 901
