"""Deterministic synthetic datasets: COCO-format detection and image+PNG-mask segmentation.

Every sample is a pure function of (seed, index), so generation can run in parallel, resume after
an interruption (finished files are kept, partial ones never exist: write-then-rename) and produce
byte-identical trees on every node.

Generation runs on the storage under test, where somebody else may have planted links: no link
below `out` is followed (`out` as given may pass through one, e.g. a mount). images/ and masks/ are
opened relative to `out`'s descriptor with O_NOFOLLOW, so a linked folder is refused naming it; every
file is written as a temp file created O_EXCL|O_NOFOLLOW and renamed within its folder's descriptor,
and stale samples are removed the same way (a link at a sample's name is replaced or removed, its
target never touched).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from bench.errors import ConfigError, DatasetError
from bench.safe_fs import Refusal, lstat_at, open_dir, open_root, write_atomic

Kind = Literal["coco", "segmentation"]
NUM_CATEGORIES = 8
NUM_SEG_CLASSES = 19
ANNOTATIONS = "annotations.json"
SEG_INDEX = "index.json"
# COCO category ids are not contiguous; keep that property so loaders must remap like DALI does.
CATEGORY_IDS = tuple(range(1, 2 * NUM_CATEGORIES, 2))
_REFUSAL = Refusal(DatasetError, "generation writes through no link inside the dataset (remove it and rerun)")


@dataclass(frozen=True)
class GenerateSpec:
    kind: Kind
    out: Path
    images: int | None = None
    total_bytes: int | None = None
    min_side: int = 96
    max_side: int = 160
    seed: int = 0
    workers: int = 2
    quality: int = 90

    def __post_init__(self) -> None:
        if (self.images is None) == (self.total_bytes is None):
            raise ConfigError("images/total_bytes: give exactly one of --images or --total-bytes")
        if self.images is not None and self.images < 1:
            raise ConfigError(f"images: must be >= 1, got {self.images}")
        if self.total_bytes is not None and self.total_bytes < 1024:
            raise ConfigError(f"total_bytes: must be >= 1024, got {self.total_bytes}")
        if not 16 <= self.min_side <= self.max_side <= 8192:
            raise ConfigError(
                f"min_side/max_side: need 16 <= min_side <= max_side <= 8192, got {self.min_side}/{self.max_side}"
            )


@dataclass(frozen=True)
class Sample:
    index: int
    width: int
    height: int
    boxes: tuple[tuple[int, int, int, int, int], ...]  # x, y, w, h, class


def sample_layout(spec: GenerateSpec, index: int) -> Sample:
    rng = np.random.default_rng([spec.seed, index])
    width = int(rng.integers(spec.min_side, spec.max_side + 1))
    height = int(rng.integers(spec.min_side, spec.max_side + 1))
    boxes = []
    for _ in range(int(rng.integers(1, 5))):
        w = int(rng.integers(max(4, width // 8), max(5, width // 2)))
        h = int(rng.integers(max(4, height // 8), max(5, height // 2)))
        x = int(rng.integers(0, width - w))
        y = int(rng.integers(0, height - h))
        n_classes = NUM_CATEGORIES if spec.kind == "coco" else NUM_SEG_CLASSES - 1
        boxes.append((x, y, w, h, int(rng.integers(0, n_classes))))
    return Sample(index, width, height, tuple(boxes))


def _render(spec: GenerateSpec, sample: Sample) -> tuple[bytes, bytes | None]:
    rng = np.random.default_rng([spec.seed, sample.index, 1])
    image = rng.integers(0, 64, (sample.height, sample.width, 3), dtype=np.uint8)
    mask = np.zeros((sample.height, sample.width), dtype=np.uint8)
    palette = np.random.default_rng(spec.seed).integers(64, 256, (NUM_SEG_CLASSES, 3), dtype=np.uint8)
    for x, y, w, h, cls in sample.boxes:
        image[y : y + h, x : x + w] = palette[cls + 1]
        mask[y : y + h, x : x + w] = cls + 1
    jpeg = io.BytesIO()
    Image.fromarray(image).save(jpeg, format="JPEG", quality=spec.quality)
    if spec.kind != "segmentation":
        return jpeg.getvalue(), None
    png = io.BytesIO()
    Image.fromarray(mask, mode="L").save(png, format="PNG")
    return jpeg.getvalue(), png.getvalue()


def image_name(index: int) -> str:
    return f"{index:08d}.jpg"


def mask_name(index: int) -> str:
    return f"{index:08d}.png"


@contextlib.contextmanager
def _sample_dirs(spec: GenerateSpec) -> Iterator[tuple[int, int | None]]:
    """Descriptors of images/ (and masks/ for segmentation), made if missing; a link there is refused.

    Each process opens its own: descriptors do not travel to pool workers.
    """
    with contextlib.ExitStack() as stack, open_root(spec.out) as root_fd:
        fds = []
        for folder in ("images", "masks") if spec.kind == "segmentation" else ("images",):
            fd = open_dir(root_fd, folder, spec.out / folder, _REFUSAL, create=True)
            stack.callback(os.close, fd)
            fds.append(fd)
        yield fds[0], (fds[1] if len(fds) > 1 else None)


def _regular_size(dir_fd: int, name: str) -> int | None:
    """Size of the regular file `name`, or None when absent or anything else (a link is never a finished sample)."""
    st = lstat_at(dir_fd, name)
    return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None


def _write_sample(spec: GenerateSpec, index: int, images_fd: int, masks_fd: int | None) -> int:
    """Write one sample unless it is already there; returns the sample's bytes on disk."""
    targets = [(images_fd, image_name(index))] + ([(masks_fd, mask_name(index))] if masks_fd is not None else [])
    sizes = [_regular_size(fd, name) for fd, name in targets]
    if None not in sizes:
        return sum(sizes)
    jpeg, png = _render(spec, sample_layout(spec, index))
    write_atomic(images_fd, image_name(index), jpeg)
    if png is not None and masks_fd is not None:
        write_atomic(masks_fd, mask_name(index), png)
    return len(jpeg) + (len(png) if png else 0)


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def _write_range(spec: GenerateSpec, indices: range) -> int:
    with _sample_dirs(spec) as (images_fd, masks_fd):
        return sum(_write_sample(spec, i, images_fd, masks_fd) for i in indices)


# The COCO/segmentation index is built in memory before it is written: about this much per image.
INDEX_BYTES_PER_IMAGE = 1024


def check_resources(spec: GenerateSpec, copies: int = 2) -> None:
    """Refuse, before writing anything, a dataset this machine cannot hold (disk for `copies` trees, RAM
    for the index): a form value of 100,000,000 images must be an error, not 41 GiB and 10 hours later."""
    import shutil

    import psutil

    if spec.images is None:
        return  # sized by total_bytes: bounded by what the user asked for, checked below per byte
    per_image = (
        sum(
            len(jpeg) + (len(png) if png else 0)
            for jpeg, png in (_render(spec, sample_layout(spec, i)) for i in range(4))
        )
        / 4
    )
    need = int(spec.images * per_image * copies)
    where = spec.out
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if need > free:
        raise ConfigError(
            f"dataset_images: {spec.images} {spec.kind} images need about {need / 1e9:.1f} GB "
            f"({copies} copies of ~{per_image / 1e3:.0f} kB each) but {where} has {free / 1e9:.1f} GB free"
        )
    index = spec.images * INDEX_BYTES_PER_IMAGE
    available = psutil.virtual_memory().available
    if index > available // 4:
        raise ConfigError(
            f"dataset_images: {spec.images} images need a ~{index / 1e9:.1f} GB index in memory; this machine "
            f"has {available / 1e9:.1f} GB available (at most a quarter of it may go to the index)"
        )


def generate(spec: GenerateSpec, copies: int = 1) -> dict:
    """Generate (or finish generating) a dataset; returns a summary with count and bytes."""
    check_resources(spec, copies)
    spec.out.mkdir(parents=True, exist_ok=True)
    with _sample_dirs(spec):
        pass  # makes the folders, and refuses a linked one here rather than in every pool worker
    count = spec.images
    if count is None:
        probe = min(16, max(1, spec.total_bytes // 4096))
        per_image = _write_range(spec, range(probe)) / probe
        count = max(1, round(spec.total_bytes / per_image))
    total = 0
    chunk = max(1, min(256, count // (4 * max(1, spec.workers)) or 1))
    if spec.workers <= 1:
        total = _write_range(spec, range(count))
    else:
        with ProcessPoolExecutor(spec.workers) as pool:
            futures = [pool.submit(_write_range, spec, r) for r in _chunks(count, chunk)]
            total = sum(f.result() for f in futures)
    _remove_beyond(spec, count)
    _write_index(spec, count)
    return {"kind": spec.kind, "images": count, "bytes": total, "path": str(spec.out)}


def _remove_beyond(spec: GenerateSpec, count: int) -> None:
    """A tree once generated larger keeps exactly `count` samples: the spec, not the history.

    Names are unlinked relative to their folder's descriptor: a link is removed itself, never its
    target; a folder with a sample's name is left alone, and a linked images/ or masks/ is refused.
    """
    with open_root(spec.out) as root_fd:
        for folder, suffix in (("images", ".jpg"), ("masks", ".png")):
            try:
                fd = open_dir(root_fd, folder, spec.out / folder, _REFUSAL)
            except FileNotFoundError:
                continue
            try:
                _remove_samples_from(fd, suffix, count)
            finally:
                os.close(fd)


def _remove_samples_from(dir_fd: int, suffix: str, count: int) -> None:
    """Unlink, within `dir_fd`, every sample named `count` or beyond that is not a folder."""
    for name in os.listdir(dir_fd):
        stem = name.removesuffix(suffix)
        if name.endswith(suffix) and stem.isdigit() and int(stem) >= count:
            st = lstat_at(dir_fd, name)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=dir_fd)


def _write_index(spec: GenerateSpec, count: int) -> None:
    samples = [sample_layout(spec, i) for i in range(count)]
    if spec.kind == "coco":
        doc = {
            "info": {"description": "scalewatch synthetic COCO", "seed": spec.seed},
            "images": [
                {"id": s.index + 1, "file_name": image_name(s.index), "width": s.width, "height": s.height}
                for s in samples
            ],
            "annotations": [
                {
                    "id": s.index * 16 + k + 1,
                    "image_id": s.index + 1,
                    "category_id": CATEGORY_IDS[cls],
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
                for s in samples
                for k, (x, y, w, h, cls) in enumerate(s.boxes)
            ],
            "categories": [{"id": c, "name": f"class{c}"} for c in CATEGORY_IDS],
        }
        _write_top(spec, ANNOTATIONS, json.dumps(doc).encode())
    else:
        doc = {
            "num_classes": NUM_SEG_CLASSES,
            "pairs": [[f"images/{image_name(s.index)}", f"masks/{mask_name(s.index)}"] for s in samples],
        }
        _write_top(spec, SEG_INDEX, json.dumps(doc).encode())


def _write_top(spec: GenerateSpec, name: str, data: bytes) -> None:
    """Write the index at the tree's top: temp file and rename relative to `out`'s descriptor."""
    with open_root(spec.out) as root_fd:
        write_atomic(root_fd, name, data)
