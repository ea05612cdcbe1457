import json
import os
import shutil
import subprocess

import pytest

from bench.data.generate import GenerateSpec, generate
from bench.data.stage import JOURNAL, MANIFEST, stage, verify
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


def small_source(root, names=("a.jpg", "b.jpg")):
    (root / "images").mkdir(parents=True)
    for name in names:
        (root / "images" / name).write_bytes(name.encode() * 1000)
    return root


def interrupt_after(n: int):
    seen = []

    def progress(rel: str) -> None:
        seen.append(rel)
        if len(seen) == n:
            raise KeyboardInterrupt

    return progress


def test_a_planted_partial_symlink_never_writes_through_to_its_target(tmp_path):
    src, dst = small_source(tmp_path / "src"), tmp_path / "dst"
    stage(src, dst)
    outside = tmp_path / "outside.txt"
    outside.write_text("somebody else's file")
    (src / "images" / "a.jpg").write_bytes(b"new bytes" * 500)  # so the restage copies a.jpg again
    (dst / "images" / ".a.jpg.partial").symlink_to(outside)
    stage(src, dst)
    assert outside.read_text() == "somebody else's file"
    target = dst / "images" / "a.jpg"
    assert not target.is_symlink() and target.read_bytes() == b"new bytes" * 500
    assert not (dst / "images" / ".a.jpg.partial").exists() and verify(dst) == []


def test_a_planted_directory_symlink_in_the_target_is_refused_and_nothing_is_written_outside(tmp_path):
    src, dst = small_source(tmp_path / "src"), tmp_path / "dst"
    stage(src, dst)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "theirs.txt").write_text("theirs")
    shutil.rmtree(dst / "images")
    (dst / "images").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StagingError, match=rf"{dst / 'images'}: is a symbolic link; staging follows no links"):
        stage(src, dst)
    assert sorted(p.name for p in outside.iterdir()) == ["theirs.txt"]
    assert not (dst / MANIFEST).exists()


def test_a_journal_deletion_never_follows_a_directory_symlink(tmp_path):
    src = small_source(tmp_path / "src")
    (src / "old").mkdir()
    (src / "old" / "x.jpg").write_bytes(b"x" * 100)
    dst = tmp_path / "dst"
    with pytest.raises(KeyboardInterrupt):  # the journal now lists old/x.jpg; no manifest yet
        stage(src, dst, progress=interrupt_after(3))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.jpg").write_text("not ours, same name")
    shutil.rmtree(src / "old")  # gone from the source: the restage removes what it staged there
    shutil.rmtree(dst / "old")
    (dst / "old").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StagingError, match=rf"{dst / 'old'}: is a symbolic link; staging follows no links"):
        stage(src, dst)
    assert (outside / "x.jpg").read_text() == "not ours, same name"


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_symlink_in_the_source_is_refused_naming_it(tmp_path, kind):
    src, dst = small_source(tmp_path / "src"), tmp_path / "dst"
    secret = tmp_path / "secret"
    if kind == "file":
        secret.write_text("outside the dataset")
        (src / "images" / "c.jpg").symlink_to(secret)
        link = src / "images" / "c.jpg"
    else:
        secret.mkdir()
        (secret / "c.jpg").write_text("outside the dataset")
        (src / "more").symlink_to(secret, target_is_directory=True)
        link = src / "more"
    with pytest.raises(StagingError, match=rf"{link}: is a symbolic link; staging copies no links"):
        stage(src, dst)
    assert not (dst / MANIFEST).exists()
    assert not [p for p in dst.rglob("*") if p.is_file() and p.read_bytes() == b"outside the dataset"]


def test_after_an_interruption_a_same_size_corrupted_file_is_copied_again_not_skipped(tmp_path):
    src, dst = small_source(tmp_path / "src", names=("a.jpg", "b.jpg", "c.jpg")), tmp_path / "dst"
    with pytest.raises(KeyboardInterrupt):
        stage(src, dst, progress=interrupt_after(2))
    victim = dst / "images" / "a.jpg"
    st = victim.stat()
    victim.write_bytes(b"Z" * st.st_size)  # a torn or flipped write: same size, and its mtime put back
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = stage(src, dst)
    assert victim.read_bytes() == (src / "images" / "a.jpg").read_bytes()
    assert result.copied == 2 and result.skipped == 1  # a.jpg again, c.jpg; b.jpg checked by its hash
    assert verify(dst) == []


@pytest.mark.parametrize("name", [".scalewatch-stage.jsonl", ".MANIFEST.json.tmp"])
def test_a_planted_journal_or_manifest_temp_link_is_never_written_through(tmp_path, name):
    src, dst = small_source(tmp_path / "src"), tmp_path / "dst"
    stage(src, dst)
    outside = tmp_path / "outside.txt"
    outside.write_text("somebody else's file")
    (dst / name).symlink_to(outside)
    if name == JOURNAL:
        with pytest.raises(StagingError, match=rf"{dst / name}: is a symbolic link; staging follows no links"):
            stage(src, dst)
    else:
        stage(src, dst)
        assert verify(dst) == []
    assert outside.read_text() == "somebody else's file"


def test_verify_reads_no_file_through_a_symlink(tmp_path):
    src, dst = small_source(tmp_path / "src"), tmp_path / "dst"
    stage(src, dst)
    copy = tmp_path / "copy.jpg"
    shutil.copy(dst / "images" / "a.jpg", copy)  # identical bytes, but outside the tree
    (dst / "images" / "a.jpg").unlink()
    (dst / "images" / "a.jpg").symlink_to(copy)
    problems = verify(dst)
    assert problems == [f"{dst / 'images' / 'a.jpg'}: is a symbolic link (not followed)"], problems
