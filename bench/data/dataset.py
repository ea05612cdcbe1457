"""Reading and validating dataset trees before any rank starts: errors name the file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bench.data.generate import ANNOTATIONS, SEG_INDEX
from bench.data.location import S3Location
from bench.errors import DatasetError


@dataclass(frozen=True)
class CocoDataset:
    root: Path | S3Location  # a folder, or the staged prefix in a bucket (bench.data.dataset_s3)
    annotations_file: Path | str
    files: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes on disk (or of the object), per image
    boxes: tuple[tuple[tuple[float, float, float, float, int], ...], ...]  # ltrb in [0,1], label
    num_categories: int


@dataclass(frozen=True)
class SegmentationDataset:
    root: Path | S3Location
    images: tuple[str, ...]
    masks: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes of image + mask
    num_classes: int


class Tree(Protocol):
    """Where a dataset's files are: a folder (FileTree) or a staged prefix in a bucket
    (bench.data.dataset_s3.S3Tree). The parsers below read a layout's index through it and ask it each
    listed file's size, so one set of rules checks both; errors name `where(rel)`."""

    root: Path | S3Location

    def where(self, rel: str) -> str: ...

    def read_text(self, rel: str) -> str | None:
        """The file's text, None where it is missing."""

    def size(self, rel: str) -> int | None:
        """The file's bytes, None where it is missing."""

    def count(self, folder: str, suffix: str) -> int:
        """How many files directly under `folder` end with `suffix`."""


@dataclass(frozen=True)
class FileTree:
    root: Path

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    def read_text(self, rel: str) -> str | None:
        path = self.root / rel
        if not path.is_file():
            return None
        try:
            return path.read_text()
        except UnicodeDecodeError as error:
            raise DatasetError(f"{path}: not valid JSON ({error})") from None

    def size(self, rel: str) -> int | None:
        path = self.root / rel
        return path.stat().st_size if path.is_file() else None

    def count(self, folder: str, suffix: str) -> int:
        return len(list((self.root / folder).glob(f"*{suffix}")))


def _require_dir(root: Path) -> None:
    if not root.is_dir():
        raise DatasetError(f"--data {root}: not a directory")
    if not any(root.iterdir()):
        raise DatasetError(f"--data {root}: directory is empty")


def _load_json(tree: Tree, rel: str) -> dict:
    text = tree.read_text(rel)
    if text is None:
        raise DatasetError(f"{tree.where(rel)}: missing")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{tree.where(rel)}: not valid JSON ({error})") from None
    if not isinstance(doc, dict):
        raise DatasetError(f"{tree.where(rel)}: top level must be an object")
    return doc


def inside(name) -> bool:
    """`name` is a relative POSIX name that stays inside its tree: no leading `/`, no `.`/`..` or empty
    part, no backslash (a folder's reader would otherwise open a file outside the dataset)."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name:
        return False
    return not any(p in ("", ".", "..") for p in name.split("/"))


def _relative(name, field: str) -> str:
    """A file name an index lists, inside the tree, else DatasetError naming the field."""
    if not inside(name):
        raise DatasetError(f"{field}: {name!r} is not a file name inside the dataset")
    return name


def load_coco(root: Path) -> CocoDataset:
    """Parse and check a COCO tree (`images/`, `annotations.json`) in a folder."""
    _require_dir(root)
    return coco_of(FileTree(root))


def coco_of(tree: Tree) -> CocoDataset:
    """Parse and check a COCO tree (`images/`, `annotations.json`); labels remapped to 1..N like DALI."""
    path = tree.where(ANNOTATIONS)
    doc = _load_json(tree, ANNOTATIONS)
    try:
        categories = sorted(int(c["id"]) for c in doc["categories"])
        images = {int(i["id"]): i for i in doc["images"]}
        per_image: dict[int, list] = {k: [] for k in images}
        for n, ann in enumerate(doc["annotations"]):
            image_id = int(ann["image_id"])
            if image_id not in images:
                raise DatasetError(f"{path}: annotations[{n}] refers to unknown image_id {image_id}")
            x, y, w, h = (float(v) for v in ann["bbox"])
            if w <= 0 or h <= 0 or x < 0 or y < 0:
                raise DatasetError(f"{path}: annotations[{n}] has a degenerate bbox {ann['bbox']}")
            per_image[image_id].append((x, y, w, h, int(ann["category_id"])))
    except (KeyError, TypeError, ValueError) as error:
        raise DatasetError(f"{path}: malformed COCO annotations ({type(error).__name__}: {error})") from None
    if not images:
        raise DatasetError(f"{path}: no images listed")
    label_of = {c: i + 1 for i, c in enumerate(categories)}
    files, sizes, boxes = [], [], []
    for image_id in sorted(images):
        info = images[image_id]
        rel = f"images/{_relative(info.get('file_name'), f'{path}: image {image_id} file_name')}"
        size = tree.size(rel)
        if size is None:
            raise DatasetError(f"{tree.where(rel)}: listed in {path} but missing")
        width, height = float(info["width"]), float(info["height"])
        items = []
        for x, y, w, h, cat in per_image[image_id]:
            if cat not in label_of:
                raise DatasetError(f"{path}: image {image_id} uses unknown category_id {cat}")
            items.append((x / width, y / height, (x + w) / width, (y + h) / height, label_of[cat]))
        files.append(info["file_name"])
        sizes.append(size)
        boxes.append(tuple(items))
    annotations = tree.root / ANNOTATIONS if isinstance(tree.root, Path) else path
    return CocoDataset(tree.root, annotations, tuple(files), tuple(sizes), tuple(boxes), len(categories))


def load_segmentation(root: Path) -> SegmentationDataset:
    """Parse and check an image + PNG mask tree (`images/`, `masks/`, `index.json`) in a folder."""
    _require_dir(root)
    return segmentation_of(FileTree(root))


def segmentation_of(tree: Tree) -> SegmentationDataset:
    """Parse and check an image + PNG mask tree (`images/`, `masks/`, `index.json`)."""
    path = tree.where(SEG_INDEX)
    doc = _load_json(tree, SEG_INDEX)
    pairs = doc.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        raise DatasetError(f"{path}: 'pairs' must be a non-empty list of [image, mask]")
    stored_images, stored_masks = tree.count("images", ".jpg"), tree.count("masks", ".png")
    if stored_images != stored_masks:
        raise DatasetError(
            f"{tree.where('')}: image/mask count mismatch: {stored_images} images in images/, "
            f"{stored_masks} masks in masks/"
        )
    images, masks, sizes = [], [], []
    for n, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise DatasetError(f"{path}: pairs[{n}] must be [image, mask]")
        pair = [_relative(p, f"{path}: pairs[{n}]") for p in pair]
        found = [tree.size(p) for p in pair]
        for rel, size in zip(pair, found, strict=True):
            if size is None:
                raise DatasetError(f"{tree.where(rel)}: listed in {path} but missing")
        images.append(pair[0])
        masks.append(pair[1])
        sizes.append(sum(found))
    num_classes = doc.get("num_classes")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise DatasetError(f"{path}: num_classes must be an integer >= 2")
    return SegmentationDataset(tree.root, tuple(images), tuple(masks), tuple(sizes), num_classes)


# What the up-front check reads of each image: its header (markers up to the scan). A header that does
# not fit (a large EXIF thumbnail or ICC profile) is read again whole before any verdict.
HEADER_BYTES = 16 * 1024


def read_uncached(path: Path, limit: int | None = None) -> bytes:
    """A file's bytes (its first `limit` only, if given) without touching the page cache (O_DIRECT),
    so checks do not warm epoch 1. Filesystems that refuse O_DIRECT (tmpfs, where RAM is the storage
    anyway) get a plain read.
    """
    import mmap
    import os

    size = path.stat().st_size
    want = size if limit is None else min(size, limit)

    def plain() -> bytes:
        with open(path, "rb") as f:
            return f.read(want)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return plain()
    try:
        buf = mmap.mmap(-1, max(4096, (want + 4095) // 4096 * 4096))  # page-aligned, as O_DIRECT needs
        try:
            got = os.readv(fd, [buf])
        except OSError:
            return plain()
        return bytes(buf[: min(got, want)])
    finally:
        os.close(fd)


def check_jpegs(root: Path, files: tuple[str, ...], rank: int = 0, world: int = 1) -> None:
    """Verify images up front, so a corrupt JPEG fails naming the file before any step is measured.

    Each rank checks every `world`-th file from its `rank` and reads its header only: reading every
    image whole on every rank cost ranks x the dataset per scale (on a 3 TB NAS dataset at 64 GPUs,
    192 TB before epoch 1). Reads bypass the page cache: the check must leave the cache as it found
    it, or epoch 1 would be served from what the check warmed.
    """
    import io

    from PIL import Image

    def parse(data: bytes) -> None:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()

    for name in files[rank::world]:
        file = root / name
        try:
            try:
                parse(read_uncached(file, HEADER_BYTES))
            except Exception:
                if file.is_file() and file.stat().st_size > HEADER_BYTES:
                    parse(read_uncached(file))  # a header larger than the first read: judge it whole
                else:
                    raise
        except OSError as error:
            if not file.is_file():
                raise DatasetError(f"{file}: missing") from None
            raise DatasetError(f"{file}: corrupt image ({error})") from None
        except Exception as error:  # PIL raises many types for bad files
            raise DatasetError(f"{file}: corrupt image ({error})") from None
