# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""``ethosu-ng compile tests/data/sibling_factory/model.py:make``: imports its sibling."""

import torch
from blocks import block


def make():
    return block(), (torch.randn(1, 3, 8, 8),)
