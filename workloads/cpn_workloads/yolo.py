"""A YOLOv8m-shaped detector, written here from the published architecture.

The shape is the one published for YOLOv8 (backbone, PAN neck, anchor-free decoupled head)
at the "m" scale: depth multiple 0.67, width multiple 0.75, channels capped at 768 before
scaling. That gives stage widths 48, 96, 192, 384, 576 and C2f repeats 2, 4, 4, 2 in the
backbone and 2 in the neck; about 25.9 M parameters for 80 classes. No code of the
`ultralytics` package (AGPL-3.0) is used or imported; this module is Apache-2.0 like cpn.

Only the network is the published one. The training loss here is a stand-in of the same
tensor shapes (a distribution-focal-style cross-entropy over the box bins and a BCE over the
class logits against random targets): it exercises every output in the backward pass, but
the published loss's target assigner is not modelled, so its (small) cost is not measured.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# YOLOv8 base widths and repeats; the "m" scale multiplies them.
DEPTH_M = 0.67
WIDTH_M = 0.75
MAX_CHANNELS_M = 768
REG_MAX = 16  # bins per box side in the distribution head


def width(c: int) -> int:
    """Scaled channel count, rounded up to a multiple of 8."""
    return int(math.ceil(min(c, MAX_CHANNELS_M) * WIDTH_M / 8) * 8)


def depth(n: int) -> int:
    return max(round(n * DEPTH_M), 1)


class Conv(nn.Sequential):
    """Conv2d without bias, BatchNorm, SiLU; 'same' padding for odd kernels."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False),
            nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03),
            nn.SiLU(inplace=True),
        )


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.a = Conv(c, c, 3)
        self.b = Conv(c, c, 3)
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.b(self.a(x))
        return x + y if self.shortcut else y


class C2f(nn.Module):
    """Split the input in two halves, run n bottlenecks on one, concatenate every output."""

    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool) -> None:
        super().__init__()
        self.c = c_out // 2
        self.stem = Conv(c_in, 2 * self.c, 1)
        self.blocks = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))
        self.fuse = Conv((2 + n) * self.c, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.stem(x).chunk(2, dim=1))
        for block in self.blocks:
            parts.append(block(parts[-1]))
        out: torch.Tensor = self.fuse(torch.cat(parts, dim=1))
        return out


class SPPF(nn.Module):
    """Spatial pyramid pooling: three chained 5x5 max-pools, concatenated."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        hidden = c_in // 2
        self.reduce = Conv(c_in, hidden, 1)
        self.pool = nn.MaxPool2d(5, stride=1, padding=2)
        self.fuse = Conv(4 * hidden, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.reduce(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        out: torch.Tensor = self.fuse(torch.cat(y, dim=1))
        return out


class Detect(nn.Module):
    """Anchor-free decoupled head: per level, a box branch (4 x REG_MAX bins) and a class branch."""

    def __init__(self, classes: int, channels: tuple[int, int, int]) -> None:
        super().__init__()
        box = max(16, channels[0] // 4, 4 * REG_MAX)
        cls = max(channels[0], min(classes, 100))
        self.classes = classes
        self.box = nn.ModuleList(
            nn.Sequential(Conv(c, box, 3), Conv(box, box, 3), nn.Conv2d(box, 4 * REG_MAX, 1))
            for c in channels
        )
        self.cls = nn.ModuleList(
            nn.Sequential(Conv(c, cls, 3), Conv(cls, cls, 3), nn.Conv2d(cls, classes, 1))
            for c in channels
        )

    def forward(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(box logits [B, anchors, 4, REG_MAX], class logits [B, anchors, classes])."""
        boxes, classes = [], []
        for f, box, cls in zip(feats, self.box, self.cls, strict=True):
            b = box(f).flatten(2).transpose(1, 2)
            boxes.append(b.reshape(b.shape[0], b.shape[1], 4, REG_MAX))
            classes.append(cls(f).flatten(2).transpose(1, 2))
        return torch.cat(boxes, dim=1), torch.cat(classes, dim=1)


class YOLOv8m(nn.Module):
    def __init__(self, classes: int = 80) -> None:
        super().__init__()
        w1, w2, w3, w4, w5 = (width(c) for c in (64, 128, 256, 512, 1024))
        # backbone: stride 2 convs and C2f stages; P3, P4, P5 feed the neck
        self.p1 = Conv(3, w1, 3, 2)
        self.p2 = nn.Sequential(Conv(w1, w2, 3, 2), C2f(w2, w2, depth(3), True))
        self.p3 = nn.Sequential(Conv(w2, w3, 3, 2), C2f(w3, w3, depth(6), True))
        self.p4 = nn.Sequential(Conv(w3, w4, 3, 2), C2f(w4, w4, depth(6), True))
        self.p5 = nn.Sequential(Conv(w4, w5, 3, 2), C2f(w5, w5, depth(3), True), SPPF(w5, w5))
        # neck: top-down then bottom-up (PAN), C2f without shortcuts
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.td4 = C2f(w5 + w4, w4, depth(3), False)
        self.td3 = C2f(w4 + w3, w3, depth(3), False)
        self.down3 = Conv(w3, w3, 3, 2)
        self.bu4 = C2f(w3 + w4, w4, depth(3), False)
        self.down4 = Conv(w4, w4, 3, 2)
        self.bu5 = C2f(w4 + w5, w5, depth(3), False)
        self.head = Detect(classes, (w3, w4, w5))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p3 = self.p3(self.p2(self.p1(x)))
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.td4(torch.cat([self.up(p5), p4], dim=1))
        n3 = self.td3(torch.cat([self.up(t4), p3], dim=1))
        n4 = self.bu4(torch.cat([self.down3(n3), t4], dim=1))
        n5 = self.bu5(torch.cat([self.down4(n4), p5], dim=1))
        out: tuple[torch.Tensor, torch.Tensor] = self.head([n3, n4, n5])
        return out


def anchors(image_size: int) -> int:
    """Anchor points over the three levels (strides 8, 16, 32)."""
    return sum((image_size // s) ** 2 for s in (8, 16, 32))


def stand_in_loss(
    out: tuple[torch.Tensor, torch.Tensor], box_bins: torch.Tensor, cls_target: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy over the box bins plus BCE over the classes (see the module's docstring)."""
    box_logits, cls_logits = out
    box = nn.functional.cross_entropy(box_logits.float().reshape(-1, REG_MAX), box_bins.reshape(-1))
    cls = nn.functional.binary_cross_entropy_with_logits(cls_logits.float(), cls_target)
    return box + cls
