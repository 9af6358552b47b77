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
