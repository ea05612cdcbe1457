"""torch DataLoader backend: same files, same augmentations and outputs as the DALI pipelines.

The files come through an opener (`rel -> what PIL opens`): a folder's path (FileOpener), or the
bytes of one counted GET from a bucket (bench.loaders.s3_images), so one decode and one augmentation
serve both storage kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler

from bench.data.dataset import CocoDataset, SegmentationDataset
from bench.errors import DatasetError
from bench.loaders.base import MEAN, STD, LoaderOptions, LoaderStats, Shard
from bench.models.ssd import encode

_MEAN = torch.tensor(MEAN).view(3, 1, 1)
_STD = torch.tensor(STD).view(3, 1, 1)


def _normalise(rgb: np.ndarray) -> torch.Tensor:
    return (torch.from_numpy(rgb).permute(2, 0, 1).float() - _MEAN) / _STD


class EpochShardSampler(Sampler[int]):
    """A seeded global shuffle per epoch, then this rank's contiguous slice: disjoint across ranks."""

    def __init__(self, n: int, shard: Shard, seed: int) -> None:
        self.n, self.shard, self.seed, self.epoch = n, shard, seed, 0

    def __iter__(self) -> Iterator[int]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        self.epoch += 1
        return iter(order[self.shard.indices(self.n)].tolist())

    def __len__(self) -> int:
        return len(self.shard.indices(self.n))


Opener = Callable[[str], "Path | IO[bytes]"]


def _decoded(source, mode: str) -> Image.Image:
    """The image decoded whole in `mode`; one that does not decode (truncated, not an image) is a
    DatasetError naming the file or object, never PIL's bare message about a buffer."""
    try:
        with Image.open(source) as img:
            return img.convert(mode)
    except (OSError, SyntaxError, ValueError) as error:  # PIL's errors for a bad file
        raise DatasetError(f"{getattr(source, 'url', source)}: corrupt image ({error})") from None


class FileOpener:
    """A folder's files: `rel` -> its path (a class, not a lambda: it crosses into loader workers)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, rel: str) -> Path:
        return self.root / rel


class _CocoFiles(Dataset):
    def __init__(self, ds: CocoDataset, anchors: torch.Tensor, image_size: int, seed: int, opener: Opener) -> None:
        self.ds, self.anchors, self.size, self.seed, self.open = ds, anchors, image_size, seed, opener

    def __len__(self) -> int:
        return len(self.ds.files)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, index, torch.initial_seed() % 2**31])
        img = _decoded(self.open(f"images/{self.ds.files[index]}"), "RGB")
        boxes = np.array([b[:4] for b in self.ds.boxes[index]], dtype=np.float32).reshape(-1, 4)
        labels = np.array([b[4] for b in self.ds.boxes[index]], dtype=np.int64)
        left, top, right, bottom = _random_bbox_crop(rng, boxes)
        w, h = img.size
        img = img.crop((int(left * w), int(top * h), int(right * w), int(bottom * h)))
        img = img.resize((self.size, self.size), Image.BILINEAR)
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        keep = (centres[:, 0] > left) & (centres[:, 0] < right) & (centres[:, 1] > top) & (centres[:, 1] < bottom)
        boxes, labels = boxes[keep], labels[keep]
        boxes = (boxes - [left, top, left, top]) / [right - left, bottom - top, right - left, bottom - top]
        boxes = boxes.clip(0, 1).astype(np.float32)
        rgb = np.array(img)
        if rng.random() < 0.5:
            rgb = rgb[:, ::-1]
            boxes = np.stack([1 - boxes[:, 2], boxes[:, 1], 1 - boxes[:, 0], boxes[:, 3]], 1) if len(boxes) else boxes
        loc, cls = encode(torch.from_numpy(np.ascontiguousarray(boxes)), torch.from_numpy(labels), self.anchors)
        return {
            "images": _normalise(np.ascontiguousarray(rgb)),
            "boxes": loc,
            "labels": cls,
            "index": torch.tensor(index),
        }


def _random_bbox_crop(rng: np.random.Generator, boxes: np.ndarray) -> tuple[float, float, float, float]:
    """SSD's crop: a window of scale 0.3-1 and aspect 0.5-2 that keeps some box centre, else none."""
    for _ in range(50):
        scale = rng.uniform(0.3, 1.0)
        aspect = rng.uniform(0.5, 2.0)
        w = min(1.0, scale * np.sqrt(aspect))
        h = min(1.0, scale / np.sqrt(aspect))
        left, top = rng.uniform(0, 1 - w), rng.uniform(0, 1 - h)
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        inside = (centres[:, 0] > left) & (centres[:, 0] < left + w) & (centres[:, 1] > top) & (centres[:, 1] < top + h)
        if inside.any():
            return left, top, left + w, top + h
    return 0.0, 0.0, 1.0, 1.0


class _SegmentationFiles(Dataset):
    def __init__(self, ds: SegmentationDataset, image_size: int, seed: int, opener: Opener) -> None:
        self.ds, self.size, self.seed, self.open = ds, image_size, seed, opener

    def __len__(self) -> int:
        return len(self.ds.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, index, torch.initial_seed() % 2**31])
        side = int(self.size * rng.uniform(1.0, 1.5))
        rgb = np.array(_decoded(self.open(self.ds.images[index]), "RGB").resize((side, side), Image.BILINEAR))
        mask = np.array(_decoded(self.open(self.ds.masks[index]), "L").resize((side, side), Image.NEAREST))
        y, x = (int(rng.uniform(0, 1) * (side - self.size)) for _ in range(2))
        rgb, mask = rgb[y : y + self.size, x : x + self.size], mask[y : y + self.size, x : x + self.size]
        if rng.random() < 0.5:
            rgb, mask = rgb[:, ::-1], mask[:, ::-1]
        return {
            "images": _normalise(np.ascontiguousarray(rgb)),
            "masks": torch.from_numpy(np.ascontiguousarray(mask)).long(),
            "index": torch.tensor(index),
        }


class TorchLoader:
    def __init__(self, dataset: Dataset, sizes: tuple[int, ...], opts: LoaderOptions) -> None:
        self.steps_per_epoch = opts.steps_per_epoch(len(sizes))
        self.loader = DataLoader(
            dataset,
            batch_size=opts.batch_size,
            sampler=EpochShardSampler(len(sizes), opts.shard, opts.seed),
            drop_last=True,
            num_workers=opts.threads,
            persistent_workers=opts.threads > 0,
            pin_memory=opts.device.type == "cuda",
        )
        self.sizes, self.device, self.stats = sizes, opts.device, LoaderStats()

    def epoch(self) -> Iterator[dict[str, torch.Tensor]]:
        for batch in self.loader:
            self.stats.record(batch.pop("index").tolist(), self.sizes)
            yield {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def close(self) -> None:
        del self.loader


def coco_loader(
    ds: CocoDataset, anchors: torch.Tensor, opts: LoaderOptions, opener: Opener | None = None
) -> TorchLoader:
    """ds's images through `opener` (its folder's files by default)."""
    opener = opener or FileOpener(ds.root)  # type: ignore[arg-type]  # a folder's dataset where none is given
    return TorchLoader(_CocoFiles(ds, anchors.cpu(), opts.image_size, opts.seed, opener), ds.sizes, opts)


def segmentation_loader(ds: SegmentationDataset, opts: LoaderOptions, opener: Opener | None = None) -> TorchLoader:
    """ds's images and masks through `opener` (its folder's files by default)."""
    opener = opener or FileOpener(ds.root)  # type: ignore[arg-type]
    return TorchLoader(_SegmentationFiles(ds, opts.image_size, opts.seed, opener), ds.sizes, opts)
