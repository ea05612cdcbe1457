"""ResNet backbones in plain torch (torchvision does not import beside torch 2.13 here).

Layouts follow torchvision's ResNet so production presets have the published shapes; weights are
always random (no downloads), which is all a throughput benchmark needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 3, stride, dilation, dilation, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, cout, 3, 1, dilation, dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = _downsample(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (self.down(x) if self.down is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, dilation, dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = _downsample(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + (self.down(x) if self.down is not None else x))


def _downsample(cin: int, cout: int, stride: int) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


@dataclass(frozen=True)
class ResNetSpec:
    block: type[nn.Module]
    layers: tuple[int, int, int, int]
    widths: tuple[int, int, int, int] = (64, 128, 256, 512)
    stem: int = 64


RESNETS: dict[str, ResNetSpec] = {
    "tiny": ResNetSpec(BasicBlock, (1, 1, 1, 1), (8, 16, 32, 64), stem=8),
    "resnet18": ResNetSpec(BasicBlock, (2, 2, 2, 2)),
    "resnet34": ResNetSpec(BasicBlock, (3, 4, 6, 3)),
    "resnet50": ResNetSpec(Bottleneck, (3, 4, 6, 3)),
    "resnet101": ResNetSpec(Bottleneck, (3, 4, 23, 3)),
}


class ResNet(nn.Module):
    """Returns the four stage outputs (strides 4, 8, 16, 32 unless dilated)."""

    def __init__(self, spec: ResNetSpec, dilate_last: tuple[bool, bool, bool] = (False,) * 3):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, spec.stem, 7, 2, 3, bias=False),
            nn.BatchNorm2d(spec.stem),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        cin, dilation = spec.stem, 1
        stages = []
        self.channels: list[int] = []
        for i, (n, width) in enumerate(zip(spec.layers, spec.widths, strict=True)):
            stride = 1 if i == 0 else 2
            if i > 0 and dilate_last[i - 1]:
                dilation, stride = dilation * stride, 1
            blocks = []
            for j in range(n):
                blocks.append(spec.block(cin, width, stride if j == 0 else 1, dilation))
                cin = width * spec.block.expansion
            stages.append(nn.Sequential(*blocks))
            self.channels.append(cin)
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs
