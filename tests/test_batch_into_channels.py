# SPDX-License-Identifier: BSD-3-Clause
"""An average pool (plain or adaptive) or a nearest resize over a batch above 1 is delegated on
Ethos-U55/U65 wherever it is at batch 1, and the host run is within 1 LSB of the eager quantized
model (``passes/batch_into_channels.py``: the batch read as channels)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower, quantize
from ethosu_ng.ops import is_compute
from ethosu_ng.runtime import run_pte
from ethosu_ng.tools import upstream_op_tests as op_tests

SETTINGS = dict(
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


class Op(torch.nn.Module):
    def __init__(self, kind, kernel, stride, padding, ceil_mode, count_include_pad):
        super().__init__()
        self.kind = kind
        self.args = (kernel, stride, padding, ceil_mode, count_include_pad)

    def forward(self, x):
        kernel, stride, padding, ceil_mode, count_include_pad = self.args
        if self.kind == "avg_pool2d":
            return torch.nn.functional.avg_pool2d(
                x, kernel, stride, padding, ceil_mode, count_include_pad
            )
        if self.kind == "adaptive_avg_pool2d":
            return torch.nn.functional.adaptive_avg_pool2d(x, (kernel, stride))
        return torch.nn.functional.interpolate(x, scale_factor=2 * stride, mode="nearest")


def _lowered(module, x, target):
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(module, (x,), spec, calibration=[(x,)])
    edge, partitioner = lower(q, (x,), spec)
    cpu = sorted({op for op in partitioner.report.cpu_targets.values() if is_compute(op)})
    return q, edge, cpu


def _check(kind, batch, channels, height, width, kernel, stride, padding, modes, target):
    ceil_mode, count_include_pad = modes
    module = Op(kind, kernel, stride, padding, ceil_mode, count_include_pad).eval()
    gen = torch.Generator().manual_seed(batch * 100 + height * 10 + width)
    x = torch.randn(batch, channels, height, width, generator=gen)
    try:
        module(x)
        module(x[:1])
    except RuntimeError:
        assume(False)  # a window larger than the padded input: PyTorch refuses it
    _, _, cpu_at_1 = _lowered(module, x[:1].clone(), target)
    q, edge, cpu = _lowered(module, x, target)
    assert cpu == cpu_at_1, (cpu, "at batch 1:", cpu_at_1)
    ioq = io_quantization(edge)  # before to_executorch(), which rewrites the program's IO
    got = op_tests._outputs(run_pte(edge.to_executorch().buffer, [x]))
    with torch.no_grad():
        want = op_tests._outputs(q(x))
    worst, unit = op_tests.compare(got, want, ioq)
    assert worst <= 1 and unit == "lsb", (worst, unit)


CASES = dict(
    kind=st.sampled_from(["avg_pool2d", "adaptive_avg_pool2d", "upsample_nearest2d"]),
    batch=st.integers(2, 5),
    channels=st.integers(1, 4),
    height=st.integers(1, 9),
    width=st.integers(1, 9),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 3),
    padding=st.integers(0, 1),
    modes=st.tuples(st.booleans(), st.booleans()),
    target=st.sampled_from(["ethos-u55-128", "ethos-u65-256"]),
)


def test_avg_pool_over_a_batch_is_delegated_on_u55():
    """A padded average pool at batch 3 (upstream: "Avgpool2d needs N==1")."""
    _check("avg_pool2d", 3, 2, 7, 5, 3, 2, 1, (False, False), "ethos-u55-128")


@pytest.mark.slow
@settings(max_examples=20, **SETTINGS)
@given(**CASES)
@example(
    kind="upsample_nearest2d", batch=5, channels=2, height=1, width=3, kernel=1, stride=1,
    padding=0, modes=(False, True), target="ethos-u55-128",
)  # fmt: skip
@example(
    kind="adaptive_avg_pool2d", batch=13, channels=1, height=16, width=2, kernel=1, stride=1,
    padding=0, modes=(False, True), target="ethos-u55-128",
)  # fmt: skip
def test_per_plane_ops_over_a_batch_are_delegated_as_at_batch_1_many(
    kind, batch, channels, height, width, kernel, stride, padding, modes, target
):
    assume(2 * padding <= kernel)
    _check(kind, batch, channels, height, width, kernel, stride, padding, modes, target)
