"""The storage probe against real fio on a staged dataset, with a real cgroup-v1 blkio throttle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.data.generate import GenerateSpec, generate
from bench.data.stage import stage
from bench.errors import DatasetError
from bench.storage.fio_probe import ProbeError, ProbeSettings, fitted_block_size, probe
from tests.conftest import BENCH
from tests.infra.faults import blkio_read_throttle


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe")
    generate(GenerateSpec("coco", root / "src", images=120, min_side=600, max_side=800, seed=3))
    stage(root / "src", root / "staged")
    return root / "staged"


def cli(*args: str, prefix: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [BENCH, "storage", "probe", *args]
    if prefix:
        cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def recording_fio(folder: Path) -> dict:
    """An environment whose `fio` keeps a copy of every job file it is given (job-1.fio, job-2.fio, ...
    in the order run) and of what the real fio it runs printed (job-1.out, ...)."""
    folder.mkdir()
    (folder / "fio").write_text(
        "#!/bin/sh\n"
        f"n=$(($(ls {folder} | grep -c '[.]fio$') + 1))\n"
        f'for a in "$@"; do case "$a" in *.fio) cp "$a" "{folder}/job-$n.fio";; esac; done\n'
        f'{shutil.which("fio")} "$@" >"{folder}/job-$n.out"; rc=$?\n'
        f'cat "{folder}/job-$n.out"; exit $rc\n'
    )
    (folder / "fio").chmod(0o755)
    return os.environ | {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def fio_report(out: Path) -> dict:
    """fio's --output-format=json document from what it printed (any notes before the JSON left out)."""
    text = out.read_text()
    return json.loads(text[text.index("{") :])


@pytest.mark.rates
def test_probe_climbs_parallelism_and_reports_a_ceiling(staged, tmp_path):
    jobs = tmp_path / "fio"
    done = cli("--path", str(staged), "--max-jobs", "4", "--seconds", "1", "--json", env=recording_fio(jobs))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [lv["jobs"] for lv in doc["levels"]][:2] == [1, 2]
    best = max(doc["levels"], key=lambda lv: lv["mb_s"])
    assert doc["repeat"]["jobs"] == best["jobs"]
    assert doc["ceiling_mb_s"] == max(best["mb_s"], doc["repeat"]["mb_s"])
    assert doc["conclusive"] is True and doc["method"] == "direct"
    assert doc["sample_files"] >= 120 and doc["fio_version"].startswith("fio-")
    # Time-based: every level (and the repeat) asked fio for a sustained 1 s read, looping the files
    # rather than stopping when a sample runs out; each level's MB/s is its bytes over fio's own runtime.
    files = sorted(jobs.glob("job-*.fio"), key=lambda f: int(f.stem.split("-")[1]))
    assert len(files) == len(doc["levels"]) + 1, [f.name for f in files]
    for job, level in zip(files, [*doc["levels"], doc["repeat"]], strict=True):
        lines = job.read_text().splitlines()
        assert "time_based=1" in lines and "runtime=1" in lines and "direct=1" in lines, lines
        assert sum(line.startswith("[reader") for line in lines) == level["jobs"], (job.name, level)
        # the level's figure against fio's own: its jobs' bandwidths (each job's bytes over its own
        # runtime, summed; the jobs run side by side for the same second)
        reads = [j["read"] for j in fio_report(job.with_suffix(".out"))["jobs"]]
        assert level["bytes"] == sum(r["io_bytes"] for r in reads), (job.name, level)
        assert level["mb_s"] == pytest.approx(sum(r["bw_bytes"] for r in reads) / 1e6, rel=0.05), (job.name, level)
    assert doc["ceiling_mb_s"] >= 0.95 * max(
        sum(j["read"]["bw_bytes"] for j in fio_report(out)["jobs"]) / 1e6 for out in jobs.glob("job-*.out")
    )


def test_each_read_starts_after_the_files_earlier_reads_touched():
    """A storage server's cache holds what this probe read before: each read starts after it, and a read
    that comes back to touched files (the sample ran out, or a job read past its last file) is not fresh."""
    from bench.storage.fio_probe import _Sample

    sample = _Sample([(Path(f"/d/{i}.jpg"), 100) for i in range(10)])
    shares = sample.shares(2)
    assert shares == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    assert sample.consume(shares, [250, 250]) is True  # files 0-5, the last of each partly
    shares = sample.shares(1)
    assert shares[0][:4] == [6, 7, 8, 9]
    assert sample.consume(shares, [300]) is True  # 6, 7, 8
    assert sample.consume(sample.shares(1), [150]) is False  # 9, then 0 again
    wrapped = _Sample([(Path("/d/a.jpg"), 100), (Path("/d/b.jpg"), 100)])
    assert wrapped.consume(wrapped.shares(1), [500]) is False  # read past its last file: back to its first


def test_block_size_fits_the_files():
    assert fitted_block_size([70_000, 90_000, 120_000]) == 65536
    assert fitted_block_size([100]) == 512
    assert fitted_block_size([2600, 2500, 2700]) == 2048  # fio reads nothing of a file under one block
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


@pytest.mark.rates
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


@pytest.mark.rates
@pytest.mark.slow
def test_the_best_level_is_read_twice_and_the_ceiling_is_the_better_read(staged, tmp_path):
    """The first read runs under a real blkio throttle (a busy neighbour on a shared disk), the second
    does not: the ceiling is the second read's, and the first is kept in the levels as it was."""
    from shutil import which

    rate = 16 * 1024 * 1024
    count = tmp_path / "reads"
    with blkio_read_throttle(staged, rate) as prefix:
        wrapper = tmp_path / "fio"
        wrapper.write_text(
            "#!/bin/sh\n"
            '[ "$1" = --version ] && exec ' + which("fio") + ' "$@"\n'
            f"echo x >> {count}\n"
            f'[ "$(wc -l < {count})" -eq 1 ] && {prefix}\n'
            "exec " + which("fio") + ' "$@"\n'
        )
        wrapper.chmod(0o755)
        result = probe([staged], ProbeSettings(max_jobs=1, seconds=2, fio=str(wrapper)))
    assert len(count.read_text().split()) == 2  # one level (max_jobs 1), then its repeat
    (first,) = result.levels
    assert first["mb_s"] == pytest.approx(rate / 1e6, rel=0.10)
    assert result.repeat["jobs"] == 1 and result.repeat["mb_s"] > 2 * first["mb_s"]
    assert result.ceiling_mb_s == result.repeat["mb_s"] and result.conclusive


def test_a_dataset_of_many_files_is_sampled_within_what_fio_accepts(tmp_path):
    generate(GenerateSpec("coco", tmp_path / "src", images=900, min_side=48, max_side=64, seed=4))
    stage(tmp_path / "src", tmp_path / "staged")
    result = probe([tmp_path / "staged"], ProbeSettings(max_jobs=2, seconds=1))
    assert result.ceiling_mb_s > 0 and result.sample_files == 901


def test_a_file_name_that_would_add_fio_options_is_refused_before_fio_runs(tmp_path, monkeypatch):
    """A name with a newline would add `exec_prerun=` to fio's job file (fio runs it through system(3)):
    the probe refuses it, naming the file, and the command never runs. A records manifest whose name
    climbs out of its folder is refused too."""
    from bench.data.records import RECORDS_MANIFEST, load_records

    folder = tmp_path / "records"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i:04d}.bin").write_bytes(os.urandom(65536))
    evil = "0001x\nexec_prerun=touch owned\nfilename=0002.bin"
    (folder / evil).write_bytes(os.urandom(65536))
    load_records(folder)  # the folder's listing, written to records.json as a user's folder is
    monkeypatch.chdir(tmp_path)  # where fio would have run `touch owned`
    with pytest.raises(DatasetError, match="exec_prerun") as caught:
        probe([folder], ProbeSettings(max_jobs=1, seconds=0.5))
    assert repr(evil) in str(caught.value)
    assert not (tmp_path / "owned").exists()
    doc = json.loads((folder / RECORDS_MANIFEST).read_text())
    doc["files"][0]["name"] = "../records/0000.bin"
    (folder / RECORDS_MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match="not a file of this folder"):
        load_records(folder)


def test_small_images_beside_large_records_probe_the_records_and_read(staged, tmp_path):
    """README command 1's two datasets (a real model's small images, an emulated workload's 323 kB
    records): one block size serves a level, so the probe reads the larger files' dataset, and reads it
    (a block fitted to both read nothing of the images, and the images' jobs nothing at all)."""
    from bench.data.records import RecordsSpec, generate_records
    from bench.storage.fio_probe import sample_files

    records = tmp_path / "records"
    generate_records(RecordsSpec("raw", files=64, samples_per_file=1, mean=320_000, seed=1), records)
    sample = sample_files([staged, records], 4096)
    assert sample and {p.parent for p, _ in sample} == {records}
    result = probe([staged, records], ProbeSettings(max_jobs=2, seconds=0.5))
    assert result.block_size >= 256 * 1024 and all(lv["bytes"] > 0 for lv in result.levels), result.levels
