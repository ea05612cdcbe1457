"""The up-front image check: each rank reads only its share of the files, and of each only the header,
yet a corrupt or missing image still fails naming the file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench.data.dataset import HEADER_BYTES, check_jpegs, load_coco
from bench.errors import DatasetError


def test_each_rank_checks_its_own_share_and_all_ranks_cover_every_file(datasets, tmp_path):
    root = tmp_path / "coco"
    shutil.copytree(datasets["coco"], root)
    ds = load_coco(root)
    victim = ds.files[3]
    (root / "images" / victim).write_bytes(b"\xff\xd8not a jpeg")
    with pytest.raises(DatasetError, match=f"{victim}: corrupt image"):
        check_jpegs(root / "images", ds.files, rank=1, world=2)  # files 1, 3, 5, ...
    check_jpegs(root / "images", ds.files, rank=0, world=2)  # never reads file 3
    (root / "images" / ds.files[4]).unlink()
    with pytest.raises(DatasetError, match=f"{ds.files[4]}: missing"):
        check_jpegs(root / "images", ds.files, rank=0, world=2)


def test_the_check_reads_headers_not_images(tmp_path):
    from PIL import Image  # noqa: F401  (imported before counting: its own files are not the dataset)

    from bench.data.generate import GenerateSpec, generate

    generate(GenerateSpec("coco", tmp_path / "coco", images=12, min_side=700, max_side=900, seed=6))
    ds = load_coco(tmp_path / "coco")
    big = [f for f in ds.files if (ds.root / "images" / f).stat().st_size > 2 * HEADER_BYTES]
    assert len(big) >= 10, "the test dataset needs images larger than two header reads"
    before = _read_bytes()
    check_jpegs(ds.root / "images", tuple(big))
    read = _read_bytes() - before
    whole = sum((ds.root / "images" / f).stat().st_size for f in big)
    assert read <= len(big) * (HEADER_BYTES + 4096) < whole, (read, whole)


def test_a_header_larger_than_the_first_read_is_judged_whole(tmp_path):
    from PIL import Image

    path = tmp_path / "exif.jpg"
    exif = Image.Exif()
    exif[0x010E] = "x" * (2 * HEADER_BYTES)  # ImageDescription: pushes the scan past the first read
    Image.new("RGB", (64, 64), "red").save(path, exif=exif.tobytes())
    assert path.stat().st_size > 2 * HEADER_BYTES
    check_jpegs(tmp_path, ("exif.jpg",))  # valid: no false alarm


def _read_bytes() -> int:
    """This process's bytes read through read(2) and friends (rchar counts O_DIRECT reads too)."""
    for line in Path(f"/proc/{os.getpid()}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")
