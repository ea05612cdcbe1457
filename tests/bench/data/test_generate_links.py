"""Dataset generation on storage somebody else can write: a planted link is never written through.

Issue 37, item 2: a planted `.00000000.jpg.tmp -> victim` was overwritten with a JPEG, and a linked
`masks/` received the PNGs. Real files and real symlinks throughout.
"""

from __future__ import annotations

import shutil

import pytest

from bench.data.generate import ANNOTATIONS, GenerateSpec, generate
from bench.errors import DatasetError

VICTIM = b"somebody else's file"


def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_bytes(VICTIM)
    return path


@pytest.mark.parametrize("planted", ["images/.00000000.jpg.tmp", f".{ANNOTATIONS}.tmp"])
def test_a_planted_temp_link_is_never_written_through(tmp_path, planted):
    out, target = tmp_path / "out", victim(tmp_path)
    (out / "images").mkdir(parents=True)
    (out / planted).symlink_to(target)
    generate(GenerateSpec("coco", out, images=3, seed=2))
    assert target.read_bytes() == VICTIM
    assert not (out / planted).is_symlink() and not (out / planted).exists()
    name = "images/00000000.jpg" if planted.startswith("images/") else ANNOTATIONS
    assert not (out / name).is_symlink() and (out / name).stat().st_size > 0


def test_a_link_at_a_finished_sample_name_is_never_taken_for_the_sample(tmp_path):
    out, target = tmp_path / "out", victim(tmp_path)
    generate(GenerateSpec("segmentation", out, images=2, seed=5, workers=1))
    mask = out / "masks" / "00000001.png"
    expected = mask.read_bytes()
    mask.unlink()
    mask.symlink_to(target)  # both files of sample 1 "exist": the image, and a link where its mask was
    generate(GenerateSpec("segmentation", out, images=2, seed=5))
    assert target.read_bytes() == VICTIM
    assert not mask.is_symlink() and mask.read_bytes() == expected


@pytest.mark.parametrize("kind,folder", [("segmentation", "masks"), ("coco", "images")])
def test_a_linked_sample_folder_is_refused_naming_it_and_nothing_is_written_there(tmp_path, kind, folder):
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / "theirs.txt").write_text("theirs")
    out.mkdir()
    (out / folder).symlink_to(outside, target_is_directory=True)
    with pytest.raises(DatasetError, match=rf"{out / folder}: is a symbolic link; generation writes through no link"):
        generate(GenerateSpec(kind, out, images=4, seed=1))
    assert sorted(p.name for p in outside.iterdir()) == ["theirs.txt"]


def test_shrinking_a_tree_whose_images_folder_became_a_link_deletes_nothing_behind_it(tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    generate(GenerateSpec("coco", out, images=6, seed=3, workers=1))
    shutil.move(out / "images", outside)  # somebody's folder of same-named files, linked in
    (out / "images").symlink_to(outside, target_is_directory=True)
    kept = sorted(p.name for p in outside.iterdir())
    with pytest.raises(DatasetError, match=rf"{out / 'images'}: is a symbolic link"):
        generate(GenerateSpec("coco", out, images=2, seed=3, workers=1))
    assert sorted(p.name for p in outside.iterdir()) == kept and len(kept) == 6


def test_shrinking_removes_a_stale_sample_link_itself_never_its_target(tmp_path):
    out, target = tmp_path / "out", victim(tmp_path)
    generate(GenerateSpec("coco", out, images=3, seed=3, workers=1))
    (out / "images" / "00000007.jpg").symlink_to(target)
    generate(GenerateSpec("coco", out, images=2, seed=3, workers=1))
    assert sorted(p.name for p in (out / "images").iterdir()) == ["00000000.jpg", "00000001.jpg"]
    assert target.read_bytes() == VICTIM
