# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Factories for the first-hour and IO-layout tests (``ethosu-ng compile FILE:NAME``)."""

import torch
import torch.nn as nn


class SortsOnTheCpu(nn.Module):
    """A conv, then torch.sort (no NPU support, no kernel in ExecuTorch's portable library)."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.sort(self.c(x).flatten(1), dim=1).values


def sorts():
    return SortsOnTheCpu(), (torch.randn(1, 3, 8, 8),)


class FeatureMap(nn.Module):
    """A segmentation-like head: the output is a rank-4 feature map."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.c2(self.c1(x).relu())


def feature_map():
    return FeatureMap(), (torch.randn(1, 3, 32, 32),)


class TwoInputs(nn.Module):
    """An image and a vector: one rank-4 input, one rank-2."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(6, 4)

    def forward(self, x, v):
        return self.c(x).mean(dim=(2, 3)) + self.fc(v)


def two_inputs():
    return TwoInputs(), (torch.randn(1, 3, 8, 8), torch.randn(1, 6))
