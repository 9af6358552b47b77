# SPDX-License-Identifier: BSD-3-Clause
"""Small models the tests lower. Each is a real torch module; weights are seeded, not trained."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvSplitBmm(nn.Module):
    """Seed 000 shape: conv -> split -> one branch through reshape/transpose into a bmm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        a, b = torch.split(y, 4, dim=1)
        a = a.reshape(1, 4, 64)
        return torch.bmm(a, a.transpose(1, 2)), b

    @staticmethod
    def example():
        return (torch.randn(1, 3, 8, 8),)


def conv_split_bmm():
    """``tests/models.py:conv_split_bmm`` for ``load_model`` (the zoo check's negative case)."""
    return ConvSplitBmm(), ConvSplitBmm.example()


class AttentionBlock(nn.Module):
    """Multi-head self-attention with explicit bmm (the ops a user pins to CPU)."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):  # x: (B, N, C)
        b, n, c = x.shape
        h, d = self.heads, c // self.heads
        qkv = self.qkv(x).reshape(b, n, 3, h, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q.reshape(b * h, n, d)
        k = k.reshape(b * h, n, d)
        v = v.reshape(b * h, n, d)
        att = torch.bmm(q, k.transpose(1, 2)) * (d**-0.5)
        att = att.softmax(dim=-1)
        out = torch.bmm(att, v).reshape(b, h, n, d).permute(0, 2, 1, 3).reshape(b, n, c)
        return self.proj(out) + x

    @staticmethod
    def example():
        return (torch.randn(1, 16, 32),)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = F.relu(self.c1(x))
        y = F.relu(self.c2(y)) + y
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)

    @staticmethod
    def example():
        return (torch.randn(1, 3, 16, 16),)


class SmallConv(nn.Module):
    """conv3x3 -> relu -> conv1x1 on a non-square 6x10 image, so NCHW and NHWC shapes differ."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x)))

    @staticmethod
    def example():
        return (torch.randn(1, 3, 6, 10),)


class TinyClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        y = nn.functional.max_pool2d(self.c(x).relu(), 2)
        return self.fc(y.flatten(1))


class ShiftedWindowAttention(nn.Module):
    """Swin's shifted-window block in miniature: roll, window partition, attention, reverse."""

    def __init__(self, dim=16, window=4, shift=2, heads=2):
        super().__init__()
        self.window, self.shift, self.heads = window, shift, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):  # (B, H, W, C)
        b, h, w, c = x.shape
        ws, nh = self.window, self.heads
        y = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = y.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        qkv = self.qkv(y).reshape(y.shape[0], ws * ws, 3, nh, c // nh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q * (c // nh) ** -0.5) @ k.transpose(-2, -1)
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(-1, ws * ws, c)
        y = (
            self.proj(y)
            .view(b, h // ws, w // ws, ws, ws, c)
            .permute(0, 1, 3, 2, 4, 5)
            .reshape(b, h, w, c)
        )
        return x + torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))


class ReshapeAttention(nn.Module):
    """A transformer block on a conv feature map, written the way timm's ViT / MobileViT / Swin
    code writes it: flatten(2).transpose(1, 2) into tokens, multi-head attention through
    reshape/permute/transpose around the matmuls, and back to NCHW for the next conv."""

    def __init__(self, channels=32, heads=4, depth=2):
        super().__init__()
        self.heads = heads
        self.stem = nn.Conv2d(8, channels, 3, padding=1)
        self.norms = nn.ModuleList([nn.LayerNorm(channels) for _ in range(depth)])
        self.qkv = nn.ModuleList([nn.Linear(channels, 3 * channels) for _ in range(depth)])
        self.proj = nn.ModuleList([nn.Linear(channels, channels) for _ in range(depth)])
        self.mlp = nn.ModuleList([nn.Linear(channels, channels) for _ in range(depth)])
        self.head = nn.Conv2d(channels, channels, 1)

    def forward(self, x):  # (B, 8, H, W)
        y = self.stem(x)
        b, c, h, w = y.shape
        t = y.flatten(2).transpose(1, 2)  # (B, N, C)
        for norm, qkv, proj, mlp in zip(self.norms, self.qkv, self.proj, self.mlp):
            n, nh = h * w, self.heads
            q, k, v = qkv(norm(t)).reshape(b, n, 3, nh, c // nh).permute(2, 0, 3, 1, 4).unbind(0)
            att = (q @ k.transpose(-2, -1)) * (c // nh) ** -0.5
            o = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
            t = t + proj(o)
            t = t + mlp(t).relu()
        y = t.transpose(1, 2).reshape(b, c, h, w)
        return self.head(y) + y

    @staticmethod
    def example():
        return (torch.randn(1, 8, 8, 8),)


class KeywordSpotter(nn.Module):
    """DS-CNN (the shape of Arm's ML-zoo keyword spotting model): 49 MFCC frames x 10
    coefficients, a 10x4 stride-2 convolution, depthwise-separable blocks, global average,
    12 classes."""

    def __init__(self, width: int = 32, blocks: int = 2):
        super().__init__()
        self.stem = nn.Conv2d(1, width, (10, 4), stride=2, padding=(5, 1))
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(width, width, 3, padding=1, groups=width),
                nn.ReLU(),
                nn.Conv2d(width, width, 1),
                nn.ReLU(),
            )
            for _ in range(blocks)
        )
        self.fc = nn.Linear(width, 12)

    def forward(self, x):
        y = F.relu(self.stem(x))
        for b in self.blocks:
            y = b(y)
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))

    @staticmethod
    def example():
        return (torch.randn(1, 1, 49, 10),)
