"""The emulated ranks' read path: every record of a records dataset (bench.data.records) read from its
file, decoded when the workload asks (PIL for JPEG/PNG, numpy for NPZ), then dropped, as MLPerf
Storage's reader does. A batch hands the training loop only each record's byte count: what the
emulated accelerator would have consumed is not copied again.

Sharding and shuffling as the image loaders: a seeded global permutation per epoch (or the manifest's
order without shuffle), then this rank's contiguous slice.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from bench.loaders.base import LoaderOptions, LoaderStats, Shard
from bench.loaders.torch_loader import EpochShardSampler


class _InOrder(Sampler[int]):
    def __init__(self, n: int, shard: Shard) -> None:
        self.n, self.shard = n, shard

    def __iter__(self) -> Iterator[int]:
        return iter(self.shard.indices(self.n))

    def __len__(self) -> int:
        return len(self.shard.indices(self.n))


class _Records(Dataset):
    """Sample i: (file, offset, length); read with pread, decoded when asked."""

    def __init__(self, root: Path, manifest: dict, decode: bool) -> None:
        self.root, self.format, self.decode = root, manifest["format"], decode
        self.samples = [(f["name"], o, n) for f in manifest["files"] for o, n in f["records"]]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        name, offset, length = self.samples[index]
        fd = os.open(self.root / name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if self.decode:
            decode_record(self.format, data)
        return {"bytes": torch.tensor(len(data)), "index": torch.tensor(index)}


def decode_record(fmt: str, data: bytes) -> None:
    if fmt in ("jpeg", "png"):
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            img.load()
    elif fmt == "npz":
        with np.load(io.BytesIO(data)) as arrays:
            for key in arrays.files:
                arrays[key]


class RecordsLoader:
    """A torch DataLoader over a records dataset (files here, objects in bench.loaders.s3_records):
    `threads` workers, `prefetch` batches ahead per worker. `received`: a counter of the bytes its
    reads brought back over the network (None on files: the page-cache counters see those)."""

    def __init__(self, dataset, opts: LoaderOptions, shuffle: bool, prefetch: int, received=None) -> None:
        n = len(dataset)
        self.sizes = tuple(length for _, _, length in dataset.samples)
        self.steps_per_epoch = opts.steps_per_epoch(n)
        self.received = received
        self.dataset_bytes: int | None = None  # set where the dataset is not a folder (S3: its objects' bytes)
        sampler = EpochShardSampler(n, opts.shard, opts.seed) if shuffle else _InOrder(n, opts.shard)
        self.loader = DataLoader(
            dataset,
            batch_size=opts.batch_size,
            sampler=sampler,
            drop_last=True,
            num_workers=opts.threads,
            persistent_workers=opts.threads > 0,
            prefetch_factor=prefetch if opts.threads > 0 else None,
        )
        self.stats = LoaderStats()

    def epoch(self) -> Iterator[dict[str, torch.Tensor]]:
        for batch in self.loader:
            self.stats.record(batch.pop("index").tolist(), self.sizes)
            yield batch

    def close(self) -> None:
        """Drops the DataLoader and with it its persistent workers' iterator, whose finaliser stops and
        joins the workers (CPython frees it here): `received` counts nothing after this."""
        del self.loader


def file_records_loader(
    root: Path, manifest: dict, opts: LoaderOptions, decode: bool, shuffle: bool, prefetch: int
) -> RecordsLoader:
    """The records of a folder, read with pread."""
    return RecordsLoader(_Records(root, manifest, decode), opts, shuffle, prefetch)
