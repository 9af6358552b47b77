# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""A keyword-spotting model for `ethosu-ng compile tests/data/kws.py:make` (docs/deploying.md,
"Running on a Cortex-M55"; tests/test_firmware.py follows it)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from models import KeywordSpotter  # noqa: E402


def make():
    torch.manual_seed(0)
    return KeywordSpotter().eval(), KeywordSpotter.example()
