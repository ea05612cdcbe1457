"""Reading and validating dataset trees before any rank starts: errors name the file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.data.generate import ANNOTATIONS, SEG_INDEX
from bench.errors import DatasetError


@dataclass(frozen=True)
class CocoDataset:
    root: Path
    annotations_file: Path
    files: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes on disk, per image
    boxes: tuple[tuple[tuple[float, float, float, float, int], ...], ...]  # ltrb in [0,1], label
    num_categories: int


@dataclass(frozen=True)
class SegmentationDataset:
    root: Path
    images: tuple[str, ...]
    masks: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes of image + mask
    num_classes: int


def _require_dir(root: Path) -> None:
    if not root.is_dir():
        raise DatasetError(f"--data {root}: not a directory")
    if not any(root.iterdir()):
        raise DatasetError(f"--data {root}: directory is empty")


def _load_json(path: Path) -> dict:
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    try:
        doc = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DatasetError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(doc, dict):
        raise DatasetError(f"{path}: top level must be an object")
    return doc


def load_coco(root: Path) -> CocoDataset:
    """Parse and check a COCO tree (`images/`, `annotations.json`); labels remapped to 1..N like DALI."""
    _require_dir(root)
    path = root / ANNOTATIONS
    doc = _load_json(path)
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
        file = root / "images" / info["file_name"]
        if not file.is_file():
            raise DatasetError(f"{file}: listed in {path} but missing")
        width, height = float(info["width"]), float(info["height"])
        items = []
        for x, y, w, h, cat in per_image[image_id]:
            if cat not in label_of:
                raise DatasetError(f"{path}: image {image_id} uses unknown category_id {cat}")
            items.append((x / width, y / height, (x + w) / width, (y + h) / height, label_of[cat]))
        files.append(info["file_name"])
        sizes.append(file.stat().st_size)
        boxes.append(tuple(items))
    return CocoDataset(root, path, tuple(files), tuple(sizes), tuple(boxes), len(categories))


def load_segmentation(root: Path) -> SegmentationDataset:
    """Parse and check an image + PNG mask tree (`images/`, `masks/`, `index.json`)."""
    _require_dir(root)
    path = root / SEG_INDEX
    doc = _load_json(path)
    pairs = doc.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        raise DatasetError(f"{path}: 'pairs' must be a non-empty list of [image, mask]")
    on_disk_images = len(list((root / "images").glob("*.jpg")))
    on_disk_masks = len(list((root / "masks").glob("*.png")))
    if on_disk_images != on_disk_masks:
        raise DatasetError(
            f"{root}: image/mask count mismatch: {on_disk_images} images in images/, {on_disk_masks} masks in masks/"
        )
    images, masks, sizes = [], [], []
    for n, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise DatasetError(f"{path}: pairs[{n}] must be [image, mask]")
        image, mask = (root / p for p in pair)
        for file in (image, mask):
            if not file.is_file():
                raise DatasetError(f"{file}: listed in {path} but missing")
        images.append(pair[0])
        masks.append(pair[1])
        sizes.append(image.stat().st_size + mask.stat().st_size)
    num_classes = doc.get("num_classes")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise DatasetError(f"{path}: num_classes must be an integer >= 2")
    return SegmentationDataset(root, tuple(images), tuple(masks), tuple(sizes), num_classes)


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
