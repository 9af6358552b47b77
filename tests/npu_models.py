# SPDX-License-Identifier: BSD-3-Clause
"""Small models covering the NPU operations the NPU model executes (tests/test_npu_model.py).

Each factory returns ``(module, example_inputs)``; weights are seeded, not trained.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class _Seq(nn.Module):
    def __init__(self, fn, **mods):
        super().__init__()
        for k, v in mods.items():
            setattr(self, k, v)
        self._fn = fn

    def forward(self, *xs):
        return self._fn(self, *xs)


def _img(c, h, w):
    return torch.randn(1, c, h, w)


def conv_relu():
    return _Seq(lambda s, x: F.relu(s.c(x)), c=nn.Conv2d(3, 8, 3, padding=1)), (_img(3, 8, 8),)


def conv_strided():
    m = _Seq(lambda s, x: s.c(x), c=nn.Conv2d(3, 16, 3, stride=2, padding=1))
    return m, (_img(3, 16, 16),)


def conv_dilated():
    m = _Seq(lambda s, x: s.c(x), c=nn.Conv2d(4, 8, 3, dilation=2, padding=2))
    return m, (_img(4, 12, 12),)


def conv_wide():
    """IFM depth > 32 and OFM depth > 16: depth-first weights over several IFM/OFM blocks."""
    m = _Seq(lambda s, x: s.c(x), c=nn.Conv2d(40, 48, 3, padding=1))
    return m, (_img(40, 8, 8),)


def conv_9x9():
    """Kernel larger than the 8x8 sub-kernel: the weight stream is split into sub-kernels."""
    m = _Seq(lambda s, x: s.c(x), c=nn.Conv2d(4, 8, 9, padding=4))
    return m, (_img(4, 12, 12),)


def conv_dilated_5x5():
    """Dilation 2 halves the sub-kernel to 4x4: a 5x5 kernel is split into 4 + 1."""
    m = _Seq(lambda s, x: s.c(x), c=nn.Conv2d(4, 8, 5, dilation=2, padding=4))
    return m, (_img(4, 12, 12),)


def depthwise_9x9():
    m = _Seq(lambda s, x: s.c(x), c=nn.Conv2d(8, 8, 9, padding=4, groups=8))
    return m, (_img(8, 12, 12),)


class SqueezeExcite(nn.Module):
    """MobileNetV3-style: global mean, two 1x1 convs, hardsigmoid, channel-broadcast multiply."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 16, 1)
        self.f1 = nn.Conv2d(16, 4, 1)
        self.f2 = nn.Conv2d(4, 16, 1)

    def forward(self, x):
        x = self.c(x)
        w = F.hardsigmoid(self.f2(F.relu(self.f1(x.mean((2, 3), keepdim=True)))))
        return x * w


def squeeze_excite():
    return SqueezeExcite(), (_img(16, 8, 8),)


def depthwise():
    m = _Seq(lambda s, x: s.c(x), c=nn.Conv2d(8, 8, 3, padding=1, groups=8))
    return m, (_img(8, 8, 8),)


def linear():
    return _Seq(lambda s, x: s.l(x), l=nn.Linear(16, 10)), (torch.randn(1, 16),)


def add():
    return _Seq(lambda s, x, y: x + y), (_img(8, 4, 4), _img(8, 4, 4))


def mul():
    return _Seq(lambda s, x, y: x * y), (_img(8, 4, 4), _img(8, 4, 4))


def avg_pool():
    return _Seq(lambda s, x: F.avg_pool2d(x, 2)), (_img(8, 8, 8),)


def max_pool():
    return _Seq(lambda s, x: F.max_pool2d(x, 2)), (_img(8, 8, 8),)


def mean():
    return _Seq(lambda s, x: x.mean(dim=(2, 3), keepdim=True)), (_img(8, 6, 6),)


def sigmoid():
    return _Seq(lambda s, x: torch.sigmoid(x)), (_img(8, 4, 4),)


def hardswish():
    return _Seq(lambda s, x: F.hardswish(x)), (_img(8, 4, 4),)


def relu6():
    return _Seq(lambda s, x: F.relu6(s.c(x)), c=nn.Conv2d(3, 8, 3, padding=1)), (_img(3, 8, 8),)


def concat():
    m = _Seq(lambda s, x: torch.cat([s.c(x), x], 1), c=nn.Conv2d(3, 8, 1))
    return m, (_img(3, 8, 8),)


def permute():
    m = _Seq(lambda s, x: s.c(x).permute(0, 2, 3, 1).reshape(1, 64, 8), c=nn.Conv2d(3, 8, 1))
    return m, (_img(3, 8, 8),)


def _qkv_heads(s, x):  # timm attention's head split and merge, without the matmuls
    q, k, v = s.l(x).reshape(4, 16, 3, 2, 12).permute(2, 0, 3, 1, 4).unbind(0)
    return (q + k * v).transpose(1, 2).reshape(4, 16, 24)


def qkv_heads():
    """Rank-5 and batched rank-4 transposes (DecomposeTranspose's rank-3 block swaps)."""
    return _Seq(_qkv_heads, l=nn.Linear(24, 72)), (torch.randn(4, 16, 24),)


def transpose_conv():
    """Zero-insertion IFM upscaling (IFM_UPSCALE 2), 2x2 kernel, stride 2."""
    m = _Seq(lambda s, x: s.c(x), c=nn.ConvTranspose2d(8, 8, 2, stride=2))
    return m, (_img(8, 4, 4),)


def transpose_conv_3x3():
    m = _Seq(
        lambda s, x: s.c(x),
        c=nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
    )
    return m, (_img(8, 4, 4),)


def upsample_nearest():
    """Nearest-neighbour IFM upscaling (IFM_UPSCALE 1)."""
    return _Seq(lambda s, x: F.interpolate(x, scale_factor=2, mode="nearest")), (_img(8, 4, 4),)


def avg_pool_padded():
    return _Seq(lambda s, x: F.avg_pool2d(x, 3, stride=1, padding=1)), (_img(8, 6, 6),)


def max_pool_padded():
    return _Seq(lambda s, x: F.max_pool2d(x, 3, stride=2, padding=1)), (_img(8, 8, 8),)


def min_max_abs():
    m = _Seq(lambda s, x, y: torch.minimum(x, y) + torch.maximum(x, y).abs())
    return m, (_img(8, 4, 4), _img(8, 4, 4))


def leaky_relu():
    return _Seq(lambda s, x: F.leaky_relu(x, 0.1)), (_img(8, 4, 4),)


def tanh():
    return _Seq(lambda s, x: torch.tanh(x)), (_img(8, 4, 4),)


def gelu():
    return _Seq(lambda s, x: F.gelu(x)), (_img(8, 4, 4),)


def layer_norm():
    return _Seq(lambda s, x: s.n(x), n=nn.LayerNorm(16)), (torch.randn(1, 8, 16),)


def softmax():
    return _Seq(lambda s, x: x.softmax(-1)), (torch.randn(1, 8, 16),)


class MobileNetV2Block(nn.Module):
    """Strided stem, then an inverted residual: expand 1x1, depthwise 3x3, project 1x1, add."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.expand = nn.Conv2d(16, 48, 1)
        self.dw = nn.Conv2d(48, 48, 3, padding=1, groups=48)
        self.proj = nn.Conv2d(48, 16, 1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu6(self.stem(x))
        y = F.relu6(self.dw(F.relu6(self.expand(x))))
        y = x + self.proj(y)
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


def mobilenetv2_block():
    return MobileNetV2Block(), (_img(3, 16, 16),)


ALL = {
    f.__name__: f
    for f in (
        conv_relu,
        conv_strided,
        conv_dilated,
        conv_wide,
        conv_9x9,
        conv_dilated_5x5,
        depthwise,
        depthwise_9x9,
        squeeze_excite,
        linear,
        add,
        mul,
        avg_pool,
        max_pool,
        mean,
        sigmoid,
        hardswish,
        relu6,
        concat,
        permute,
        qkv_heads,
        transpose_conv,
        transpose_conv_3x3,
        upsample_nearest,
        avg_pool_padded,
        max_pool_padded,
        min_max_abs,
        leaky_relu,
        tanh,
        gelu,
        layer_norm,
        softmax,
        mobilenetv2_block,
    )
}


def _inverted_residual(cin, cout, stride, expand=6):
    h = cin * expand
    return nn.Sequential(
        nn.Conv2d(cin, h, 1),
        nn.ReLU6(),
        nn.Conv2d(h, h, 3, stride, 1, groups=h),
        nn.ReLU6(),
        nn.Conv2d(h, cout, 1),
    )


class MobileNetV2Like224(nn.Module):
    """The first MobileNetV2 stages at 224x224 (136 M MACs): real-sized feature maps, striping,
    weight double-buffering DMAs. Slow (TOSA reference model at this size)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, 2, 1)
        self.blocks = nn.Sequential(
            _inverted_residual(32, 16, 1, 1),
            _inverted_residual(16, 24, 2),
            _inverted_residual(24, 24, 1),
            _inverted_residual(24, 32, 2),
            _inverted_residual(32, 32, 1),
            _inverted_residual(32, 64, 2),
            _inverted_residual(64, 64, 1),
        )
        self.head = nn.Conv2d(64, 256, 1)

    def forward(self, x):
        y = F.relu6(self.head(self.blocks(F.relu6(self.stem(x)))))
        return F.adaptive_avg_pool2d(y, 1).flatten(1)


def mobilenetv2_like_224():
    return MobileNetV2Like224(), (_img(3, 224, 224),)


SLOW = {"mobilenetv2_like_224": mobilenetv2_like_224}
