"""The one place that maps a workload name to its model, loss and batch layout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bench.models.deeplab import DEEPLAB_PRESETS, DeepLabV3Plus, segmentation_loss
from bench.models.ssd import SSD, SSD_PRESETS, multibox_loss


@dataclass(frozen=True)
class WorkloadModel:
    model: nn.Module
    loss: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor]
    # A conv model trains in channels_last (NHWC): tensor-core convs need it, and NCHW pays a
    # transpose around each one (bench.train.precision).
    conv: bool = True


def _ssd_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    loc, conf = model(batch["images"])
    return multibox_loss(loc, conf, batch["boxes"], batch["labels"])


def _deeplab_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return segmentation_loss(model(batch["images"]), batch["masks"])


def build(workload: str, preset: str, image_size: int) -> WorkloadModel:
    if workload == "ssd":
        return WorkloadModel(SSD(SSD_PRESETS[preset], image_size), _ssd_loss)
    if workload == "deeplabv3plus":
        return WorkloadModel(DeepLabV3Plus(DEEPLAB_PRESETS[preset]), _deeplab_loss)
    raise KeyError(workload)
