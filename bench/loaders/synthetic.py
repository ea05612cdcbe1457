"""In-memory batches: the compute upper bound, with no storage or decode in the way."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from bench.config.models import TrainConfig
from bench.loaders.base import LoaderStats

SYNTHETIC_STEPS_PER_EPOCH = 50


class SyntheticLoader:
    def __init__(self, cfg: TrainConfig, model: torch.nn.Module, device: torch.device) -> None:
        g = torch.Generator().manual_seed(cfg.seed)
        n, s = cfg.batch_size, cfg.image_size
        images = torch.randn(n, 3, s, s, generator=g)
        # In the step's layout once (channels_last for conv models), not converted again every step.
        self.batch: dict[str, torch.Tensor] = {"images": images.contiguous(memory_format=torch.channels_last)}
        if cfg.accelerator_s is not None:  # an emulated rank consumes byte counts, not images
            self.batch = {"bytes": torch.zeros(n, dtype=torch.int64)}
        elif cfg.workload == "ssd":
            anchors = model.anchors.shape[0]
            self.batch["boxes"] = torch.randn(n, anchors, 4, generator=g) * 0.1
            labels = torch.zeros(n, anchors, dtype=torch.int64)
            labels[:, :: max(1, anchors // 8)] = torch.randint(1, model.num_classes, (1,), generator=g)
            self.batch["labels"] = labels
        elif cfg.workload == "deeplabv3plus":
            self.batch["masks"] = torch.randint(0, model.num_classes, (n, s, s), generator=g)
        self.batch = {k: v.to(device) for k, v in self.batch.items()}
        self.steps_per_epoch = SYNTHETIC_STEPS_PER_EPOCH
        self.stats = LoaderStats()

    def epoch(self) -> Iterator[dict[str, torch.Tensor]]:
        for _ in range(self.steps_per_epoch):
            yield self.batch

    def close(self) -> None:
        self.batch = {}
