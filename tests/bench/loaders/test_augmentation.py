"""Segmentation augmentations keep image and mask aligned, in both loader backends."""

from __future__ import annotations

import pytest
import torch

from bench.config.models import TrainConfig
from bench.loaders.base import MEAN, STD, Shard
from bench.loaders.registry import build_loader
from bench.models.registry import build


@pytest.mark.parametrize("loader", ["dali", "torch"])
def test_random_crop_and_flip_apply_to_image_and_mask_alike(loader, datasets):
    # Generated objects are bright boxes on a dark background and the mask marks exactly those boxes,
    # so after crop, resize and flip the bright pixels must still be the mask's foreground. Measured:
    # IoU 0.88-1.0 when aligned; a mask cropped or flipped apart from its image drops to 0.03-0.86.
    cfg = TrainConfig(
        workload="deeplabv3plus",
        data=datasets["segmentation"],
        steps=1,
        batch_size=8,
        image_size=96,
        loader=loader,
        loader_threads=1,
    )
    model = build("deeplabv3plus", "tiny", 96).model
    data = build_loader(cfg, model, Shard(0, 1), torch.device("cpu"))
    ious = []
    try:
        for batch in data.epoch():
            pixels = batch["images"] * torch.tensor(STD).view(1, 3, 1, 1) + torch.tensor(MEAN).view(1, 3, 1, 1)
            bright, foreground = pixels.mean(1) > 64, batch["masks"] > 0
            union = (bright | foreground).sum((1, 2))
            # A crop of background only has neither bright pixels nor foreground: aligned, IoU 1 (it read 0).
            ious += torch.where(union > 0, (bright & foreground).sum((1, 2)) / union.clamp(min=1), 1.0).tolist()
    finally:
        data.close()
    assert len(ious) == 32
    # A crop that keeps only a sliver of a box is decided by a few edge pixels after the resize (one read
    # 0.68 in one full run; none of 640 images over 20 seeds read under 0.85): one such image is allowed.
    # A mask that goes its own way in some images (a flip or crop drawn apart from the image's) puts
    # several under 0.75.
    low = [iou for iou in ious if iou < 0.75]
    assert sorted(ious)[len(ious) // 2] >= 0.9 and len(low) <= 1, ious
