"""DeepLabv3+ in plain torch: dilated ResNet (output stride 16), ASPP, decoder with low-level skip."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.resnet import RESNETS, ResNet

IGNORE_INDEX = 255


@dataclass(frozen=True)
class DeepLabPreset:
    backbone: str
    aspp_channels: int
    rates: tuple[int, int, int]
    low_level_channels: int
    num_classes: int = 19  # Cityscapes-style label set, as in driving datasets


DEEPLAB_PRESETS = {
    "tiny": DeepLabPreset("tiny", 16, (2, 4, 6), 8),
    "small": DeepLabPreset("resnet18", 256, (6, 12, 18), 48),
    "production": DeepLabPreset("resnet101", 256, (6, 12, 18), 48),
}


def _conv_bn(cin: int, cout: int, k: int, dilation: int = 1) -> nn.Sequential:
    pad = 0 if k == 1 else dilation
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, padding=pad, dilation=dilation, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class ASPP(nn.Module):
    def __init__(self, cin: int, cout: int, rates: tuple[int, int, int]) -> None:
        super().__init__()
        self.branches = nn.ModuleList([_conv_bn(cin, cout, 1), *(_conv_bn(cin, cout, 3, r) for r in rates)])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, cout, 1, bias=False), nn.ReLU(inplace=True))
        self.project = _conv_bn(cout * 5, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False)
        return self.project(torch.cat([b(x) for b in self.branches] + [pooled], 1))


class DeepLabV3Plus(nn.Module):
    def __init__(self, preset: DeepLabPreset) -> None:
        super().__init__()
        self.num_classes = preset.num_classes
        self.backbone = ResNet(RESNETS[preset.backbone], dilate_last=(False, False, True))
        low, high = self.backbone.channels[0], self.backbone.channels[3]
        self.aspp = ASPP(high, preset.aspp_channels, preset.rates)
        self.low_level = _conv_bn(low, preset.low_level_channels, 1)
        c = preset.aspp_channels
        self.decoder = nn.Sequential(_conv_bn(c + preset.low_level_channels, c, 3), _conv_bn(c, c, 3))
        self.classifier = nn.Conv2d(c, preset.num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.backbone(x)
        high = self.aspp(feats[3])
        low = self.low_level(feats[0])
        high = F.interpolate(high, size=low.shape[-2:], mode="bilinear", align_corners=False)
        out = self.classifier(self.decoder(torch.cat([high, low], 1)))
        return F.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=False)


def segmentation_loss(logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, masks.long(), ignore_index=IGNORE_INDEX)
