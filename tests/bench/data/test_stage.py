import json
import shutil
import subprocess

import pytest

from bench.data.generate import GenerateSpec, generate
from bench.data.stage import MANIFEST, stage, verify
from bench.errors import StagingError
from tests.conftest import BENCH
from tests.infra.faults import small_disk


def test_generate_is_deterministic_and_resumable(tmp_path):
    a = generate(GenerateSpec("coco", tmp_path / "a", images=12, seed=3))
    b = generate(GenerateSpec("coco", tmp_path / "b", images=12, seed=3, workers=1))
    files = sorted(p.name for p in (tmp_path / "a" / "images").iterdir())
    assert a["images"] == b["images"] == 12
    for name in files:
        assert (tmp_path / "a/images" / name).read_bytes() == (tmp_path / "b/images" / name).read_bytes()
    (tmp_path / "a/images" / files[0]).unlink()
    again = generate(GenerateSpec("coco", tmp_path / "a", images=12, seed=3))
    assert again["bytes"] == a["bytes"]


def test_generate_by_total_bytes(tmp_path):
    out = generate(GenerateSpec("segmentation", tmp_path / "s", total_bytes=200_000))
    assert 0.7 < out["bytes"] / 200_000 < 1.3


def test_stage_manifest_skip_and_verify(tmp_path, datasets):
    dst = tmp_path / "dst"
    first = stage(datasets["coco"], dst)
    assert first.copied == first.files and (dst / MANIFEST).exists()
    second = stage(datasets["coco"], dst)
    assert second.copied == 0 and second.skipped == second.files
    assert verify(dst) == []
    victim = next((dst / "images").iterdir())
    victim.write_bytes(b"corrupt")
    problems = verify(dst)
    assert len(problems) == 1 and victim.name in problems[0]


def stage_cli(src, dst, expect_images: int) -> subprocess.CompletedProcess:
    argv = [BENCH, "dataset", "stage", "--from", str(src), "--to", str(dst), "--expect-images", str(expect_images)]
    return subprocess.run(argv, capture_output=True, text=True)


def test_stage_cli_runs_gx_checks(tmp_path, datasets):
    done = stage_cli(datasets["segmentation"], tmp_path / "d", 32)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["checks"]["success"] is True
    bad = stage_cli(datasets["segmentation"], tmp_path / "d", 33)
    assert bad.returncode == 2 and "manifest checks failed" in bad.stderr


def test_unreadable_source_and_missing_source(tmp_path):
    with pytest.raises(StagingError, match="not a readable directory"):
        stage(tmp_path / "nope", tmp_path / "d")


def test_destination_full_leaves_nothing_recorded(tmp_path, datasets):
    with small_disk(tmp_path / "small", "64k") as mnt:
        with pytest.raises(StagingError, match="destination is full"):
            stage(datasets["coco"], mnt / "d")
        assert not (mnt / "d" / MANIFEST).exists()
        assert not list((mnt / "d").rglob(".*.partial"))


def test_rerun_after_interruption_completes(tmp_path, datasets):
    src = tmp_path / "src"
    shutil.copytree(datasets["coco"], src)
    files = sum(1 for p in src.rglob("*") if p.is_file())

    def interrupt_after_five(rel: str, seen=[]) -> None:  # noqa: B006 - counts calls across this one stage
        seen.append(rel)
        if len(seen) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stage(src, tmp_path / "d", progress=interrupt_after_five)
    assert not (tmp_path / "d" / MANIFEST).exists()
    result = stage(src, tmp_path / "d")
    assert result.copied == files - 5 and result.skipped == 5 and verify(tmp_path / "d") == []


def test_regenerating_smaller_and_restaging_mirrors_the_spec(tmp_path):
    generate(GenerateSpec("coco", tmp_path / "src", images=10))
    stage(tmp_path / "src", tmp_path / "dst")
    generate(GenerateSpec("coco", tmp_path / "src", images=6))
    result = stage(tmp_path / "src", tmp_path / "dst")
    assert len(list((tmp_path / "dst" / "images").iterdir())) == 6 == len(list((tmp_path / "src" / "images").iterdir()))
    assert result.files == 7 and verify(tmp_path / "dst") == []


def test_file_changed_during_staging_is_refused_and_not_recorded(tmp_path):
    import threading
    import time

    src = tmp_path / "src"
    src.mkdir()
    growing = src / "big.bin"
    growing.write_bytes(b"\0" * (64 << 20))
    stop = threading.Event()

    def append():  # a real concurrent writer, as when a dataset is regenerated under a running stage
        with growing.open("ab") as f:
            while not stop.is_set():
                f.write(b"x" * 4096)
                f.flush()
                time.sleep(0.001)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        with pytest.raises(StagingError, match=r"big\.bin: source file changed during staging"):
            stage(src, tmp_path / "dst")
    finally:
        stop.set()
        writer.join()
    assert not (tmp_path / "dst" / "big.bin").exists() and not (tmp_path / "dst" / MANIFEST).exists()


def test_stage_refuses_a_foreign_non_empty_folder_and_keeps_its_files(tmp_path, datasets):
    dst = tmp_path / "datasets-coco"
    dst.mkdir()
    (dst / "mine.txt").write_text("the user's own data")
    with pytest.raises(StagingError, match=r"not empty and holds no scalewatch MANIFEST\.json"):
        stage(datasets["coco"], dst)
    assert (dst / "mine.txt").read_text() == "the user's own data"
    assert sorted(p.name for p in dst.iterdir()) == ["mine.txt"]
    done = stage_cli(datasets["coco"], dst, 32)
    assert done.returncode == 2 and str(dst) in done.stderr and "refusing to stage" in done.stderr
    assert sorted(p.name for p in dst.iterdir()) == ["mine.txt"]


def test_restage_removes_only_files_the_suite_staged(tmp_path):
    src = tmp_path / "src"
    (src / "images").mkdir(parents=True)
    for name in ("a.jpg", "b.jpg"):
        (src / "images" / name).write_bytes(name.encode() * 100)
    dst = tmp_path / "dst"
    stage(src, dst)
    (dst / "images" / "notes.txt").write_text("added by a person after staging")
    (src / "images" / "b.jpg").unlink()
    again = stage(src, dst)
    assert again.files == 1
    assert not (dst / "images" / "b.jpg").exists()  # staged by us, gone from the source: removed
    assert (dst / "images" / "notes.txt").read_text() == "added by a person after staging"
