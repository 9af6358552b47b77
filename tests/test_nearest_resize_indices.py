# SPDX-License-Identifier: BSD-3-Clause
"""A quantized nearest resize by any scale factor (integer or not, up or down, 1-D or 2-D) exports,
runs on the host and equals the eager quantized model exactly, on U55 and U85: the program
reads the source rows and columns eager PyTorch reads (``passes/nearest_resize_indices.py``)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower, quantize
from ethosu_ng.runtime import run_pte
from ethosu_ng.tools import upstream_op_tests as op_tests

SETTINGS = dict(
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
SCALES = st.sampled_from([0.5, 0.75, 1.0, 1.3, 1.5, 2.0, 2.25, 2.5, 3.0, 3.7])


class Resize(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.interpolate(x, scale_factor=self.scale, mode="nearest")


CASES = dict(
    rank=st.sampled_from([1, 2]),
    sizes=st.lists(st.integers(1, 7), min_size=2, max_size=2),
    scales=st.lists(SCALES, min_size=2, max_size=2),
    target=st.sampled_from(["ethos-u55-128", "ethos-u85-128"]),
)


def _check(rank, sizes, scales, target):
    sizes, scales = sizes[:rank], tuple(scales[:rank])
    if any(int(s * f) == 0 for s, f in zip(sizes, scales)):
        return  # an empty output: PyTorch refuses it
    x = torch.randn(1, 3, *sizes, generator=torch.Generator().manual_seed(len(sizes)))
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(Resize(scales if rank > 1 else scales[0]).eval(), (x,), spec, calibration=[(x,)])
    edge, _ = lower(q, (x,), spec)
    got = op_tests._outputs(run_pte(edge.to_executorch().buffer, [x]))
    with torch.no_grad():
        want = op_tests._outputs(q(x))
    worst, unit = op_tests.compare(got, want, io_quantization(edge))
    assert worst == 0, (sizes, scales, target, worst, unit)


def test_upstreams_unsupported_scale_case_is_exact():
    """Upstream's case: 2x2 by 2.25 is 4x4, twice the input, so eager reads rows 0, 0, 1, 1 where
    a read by the scale (ExecuTorch's portable kernel) gives 0, 0, 0, 1."""
    _check(2, [2, 2], [2.25, 2.25], "ethos-u55-128")


@pytest.mark.slow
@settings(max_examples=24, **SETTINGS)
@given(**CASES)
# Output size equal to the input size by a scale of 1.3: eager reads 0, 1, 2, a scale read 0, 0, 1.
@example(rank=1, sizes=[3, 3], scales=[1.3, 1.3], target="ethos-u85-128")
def test_nearest_resize_reads_what_eager_reads_many(rank, sizes, scales, target):
    _check(rank, sizes, scales, target)
