"""The loader interface both backends implement, so the training loop cannot tell them apart."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from bench.errors import ConfigError

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


@dataclass(frozen=True)
class Shard:
    """Which slice of the dataset a rank reads: contiguous, disjoint, as DALI's readers shard."""

    rank: int
    world: int

    def indices(self, n: int) -> range:
        start = n * self.rank // self.world
        return range(start, n * (self.rank + 1) // self.world)


@dataclass(frozen=True)
class LoaderOptions:
    """What every backend needs besides the dataset, so DALI and torch loaders are built alike."""

    shard: Shard
    batch_size: int
    image_size: int
    threads: int
    seed: int
    device: torch.device

    def steps_per_epoch(self, dataset_len: int) -> int:
        """Full batches in this rank's shard; a batch larger than the shard is a config error."""
        shard_len = len(self.shard.indices(dataset_len))
        if shard_len < self.batch_size:
            raise ConfigError(
                f"--batch-size {self.batch_size}: larger than this rank's shard of {shard_len} samples "
                f"({dataset_len} in the dataset over {self.shard.world} ranks)"
            )
        return shard_len // self.batch_size


@dataclass
class LoaderStats:
    """Bytes the loader consumed (file sizes of samples handed out), for the cache-hit ratio."""

    bytes_consumed: int = 0
    samples: int = 0
    sample_ids: list[int] = field(default_factory=list)

    def record(self, ids, sizes: tuple[int, ...]) -> None:
        """Count samples handed out, by dataset index, with their file sizes."""
        for i in ids:
            self.sample_ids.append(int(i))
            self.bytes_consumed += sizes[int(i)]
            self.samples += 1


class Loader(Protocol):
    stats: LoaderStats
    steps_per_epoch: int

    def epoch(self) -> Iterator[dict[str, torch.Tensor]]:
        """One pass over this rank's shard: dicts of images (N,3,S,S) float32 plus targets."""
        ...

    def close(self) -> None: ...
