# SPDX-License-Identifier: BSD-3-Clause
import logging
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

logging.getLogger("executorch").setLevel(logging.ERROR)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def calibration_batches(example, n=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(t.shape, generator=g) for t in example) for _ in range(n)]
