# SPDX-License-Identifier: BSD-3-Clause
"""A factory for `ethosu-ng compile tests/data/tiny_factory.py:make` (fast CLI tests)."""

import torch
import torch.nn as nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = self.c1(x).relu()
        z = y + self.c2(y)
        return self.fc(z.mean(dim=(2, 3)))


def make():
    return Tiny(), (torch.randn(1, 3, 16, 16),)


def broken():
    raise RuntimeError("factory exploded")
