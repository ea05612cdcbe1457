"""SSD300-style detector: ResNet backbone, six feature maps, default boxes, MultiBox loss.

Mirrors NVIDIA's SSD300 v1.1 (ResNet-50 cut after layer3 at output stride 8, five extra blocks,
4/6/6/6/4/4 boxes per cell). Feature-map sizes come from a dry run so any image size works.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.resnet import RESNETS, ResNet

ASPECT_RATIOS: tuple[tuple[int, ...], ...] = ((2,), (2, 3), (2, 3), (2, 3), (2,), (2,))
VARIANCES = (0.1, 0.2)


@dataclass(frozen=True)
class SSDPreset:
    backbone: str
    extra_out: tuple[int, ...]
    extra_mid: tuple[int, ...]
    num_classes: int = 81  # 80 COCO categories + background


SSD_PRESETS = {
    "tiny": SSDPreset("tiny", (32, 32, 16, 16, 16), (16, 16, 8, 8, 8)),
    "small": SSDPreset("resnet18", (512, 512, 256, 256, 256), (256, 256, 128, 128, 128)),
    "production": SSDPreset("resnet50", (512, 512, 256, 256, 256), (256, 256, 128, 128, 128)),
}


class SSD(nn.Module):
    def __init__(self, preset: SSDPreset, image_size: int) -> None:
        super().__init__()
        self.num_classes = preset.num_classes
        resnet = ResNet(RESNETS[preset.backbone], dilate_last=(False, True, False))
        self.stem, self.stages = resnet.stem, nn.ModuleList(list(resnet.stages)[:3])
        channels = [resnet.channels[2], *preset.extra_out]
        self.extras = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, cout, 3, 2, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            )
            for cin, mid, cout in zip(channels[:-1], preset.extra_mid, preset.extra_out, strict=True)
        )
        per_cell = [2 + 2 * len(r) for r in ASPECT_RATIOS]
        self.loc = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1) for c, n in zip(channels, per_cell, strict=True))
        self.conf = nn.ModuleList(
            nn.Conv2d(c, n * self.num_classes, 3, padding=1) for c, n in zip(channels, per_cell, strict=True)
        )
        self.eval()  # a dry run at batch 1 must not hit batch-norm's training-mode check
        with torch.no_grad():
            sizes = [f.shape[-1] for f in self._features(torch.zeros(1, 3, image_size, image_size))]
        self.train()
        self.feature_sizes = tuple(sizes)
        self.register_buffer("anchors", default_boxes(self.feature_sizes), persistent=False)

    def _features(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        feats = [x]
        for extra in self.extras:
            feats.append(extra(feats[-1]))
        return feats

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, anchors, 4) box offsets and (N, anchors, classes) logits."""
        locs, confs = [], []
        for f, loc, conf in zip(self._features(x), self.loc, self.conf, strict=True):
            n = f.shape[0]
            locs.append(loc(f).permute(0, 2, 3, 1).reshape(n, -1, 4))
            confs.append(conf(f).permute(0, 2, 3, 1).reshape(n, -1, self.num_classes))
        return torch.cat(locs, 1), torch.cat(confs, 1)


def default_boxes(feature_sizes: tuple[int, ...]) -> torch.Tensor:
    """Anchors as (cx, cy, w, h) in [0, 1], ordered like the heads' outputs."""
    scales = [0.07 + (0.95 - 0.07) * k / len(feature_sizes) for k in range(len(feature_sizes) + 1)]
    boxes = []
    for k, size in enumerate(feature_sizes):
        s, s_next = scales[k], scales[k + 1]
        shapes = [(s, s), (math.sqrt(s * s_next),) * 2]
        for r in ASPECT_RATIOS[k]:
            q = math.sqrt(r)
            shapes += [(s * q, s / q), (s / q, s * q)]
        for i, j in itertools.product(range(size), repeat=2):
            cx, cy = (j + 0.5) / size, (i + 0.5) / size
            boxes.extend((cx, cy, w, h) for w, h in shapes)
    return torch.tensor(boxes, dtype=torch.float32).clamp_(0, 1)


def to_ltrb(cxcywh: torch.Tensor) -> torch.Tensor:
    c, wh = cxcywh[..., :2], cxcywh[..., 2:]
    return torch.cat([c - wh / 2, c + wh / 2], -1)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of ltrb boxes a (A, 4) and b (B, 4)."""
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda t: (t[:, 2:] - t[:, :2]).clamp(min=0).prod(-1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter).clamp(min=1e-9)


def encode(boxes_ltrb: torch.Tensor, labels: torch.Tensor, anchors: torch.Tensor, iou: float = 0.5):
    """Match ground truth to anchors and encode offsets, as DALI's box_encoder (offset=True) does.

    Returns (anchors, 4) float32 offsets and (anchors,) int64 labels (0 = background).
    """
    n = anchors.shape[0]
    if boxes_ltrb.numel() == 0:
        return torch.zeros(n, 4), torch.zeros(n, dtype=torch.int64)
    overlaps = box_iou(boxes_ltrb, to_ltrb(anchors))  # (G, A)
    best_iou, best_gt = overlaps.max(0)
    best_gt[overlaps.argmax(1)] = torch.arange(boxes_ltrb.shape[0])
    best_iou[overlaps.argmax(1)] = 2.0
    matched = best_iou >= iou
    gt = boxes_ltrb[best_gt]
    gt_c = (gt[:, :2] + gt[:, 2:]) / 2
    gt_wh = (gt[:, 2:] - gt[:, :2]).clamp(min=1e-6)
    offsets = torch.cat(
        [
            (gt_c - anchors[:, :2]) / (VARIANCES[0] * anchors[:, 2:]),
            torch.log(gt_wh / anchors[:, 2:]) / VARIANCES[1],
        ],
        1,
    )
    offsets[~matched] = 0
    out_labels = torch.where(matched, labels[best_gt].to(torch.int64), torch.zeros_like(best_gt))
    return offsets.float(), out_labels


def multibox_loss(
    loc: torch.Tensor, conf: torch.Tensor, target_loc: torch.Tensor, target_labels: torch.Tensor
) -> torch.Tensor:
    """Smooth-L1 on positives plus cross-entropy with 3:1 hard-negative mining."""
    target_labels = target_labels.long()
    positive = target_labels > 0
    num_pos = positive.sum(1)
    loc_loss = F.smooth_l1_loss(loc, target_loc, reduction="none").sum(-1)
    loc_loss = (loc_loss * positive).sum(1)
    ce = F.cross_entropy(conf.transpose(1, 2), target_labels, reduction="none")
    mining = ce.detach().masked_fill(positive, 0)  # not mining[positive] = 0: no host sync on a GPU
    rank = mining.argsort(1, descending=True).argsort(1)
    negatives = rank < (3 * num_pos).clamp(min=1)[:, None]
    conf_loss = (ce * (positive | negatives)).sum(1)
    return ((loc_loss + conf_loss) / num_pos.clamp(min=1)).mean()
