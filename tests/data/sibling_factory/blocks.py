# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""A module the factory beside it imports (a factory file's directory is importable)."""

import torch.nn as nn


def block():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
