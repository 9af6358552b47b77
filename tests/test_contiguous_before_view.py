# SPDX-License-Identifier: BSD-3-Clause
"""A reshaping op (view, reshape, unsqueeze, permute, transpose, pixel shuffle and unshuffle) of a
tensor in the channels-last dim order exports, runs on the host and equals the eager quantized
model exactly, delegated or on the CPU, on U55 and U85 (``passes/contiguous_before_view.py``)."""

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
KINDS = {
    "view": lambda x: x.view(x.shape[0], x.shape[1], -1),
    "reshape": lambda x: x.reshape(x.shape[0], -1, x.shape[3]),
    "unsqueeze": lambda x: x.unsqueeze(2),
    "permute": lambda x: x.permute(0, 2, 3, 1),
    "transpose": lambda x: x.transpose(1, 3),
    "pixel_shuffle": lambda x: torch.nn.functional.pixel_shuffle(x, 2),
    "pixel_unshuffle": lambda x: torch.nn.functional.pixel_unshuffle(x, 2),
}


class Reorder(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        return KINDS[self.kind](x)


def _check(kind, batch, channels, h, w, target, on_cpu, monkeypatch):
    if kind == "pixel_shuffle":
        channels *= 4
    if kind == "pixel_unshuffle":
        h, w = 2 * h, 2 * w
    x = torch.randn(batch, channels, h, w, generator=torch.Generator().manual_seed(h * w))
    x = x.to(memory_format=torch.channels_last)
    if on_cpu:  # as when Vela fails on the partition: the whole program on the CPU
        from ethosu_ng.vela import compiler as vela_compiler
        from ethosu_ng.vela.compiler import VelaError

        def fails(tosa, spec, partition="delegate"):
            raise VelaError(partition, spec.target, "planted failure", "planted")

        monkeypatch.setattr(vela_compiler, "compile_tosa", fails)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(Reorder(kind).eval(), (x,), spec, calibration=[(x,)])
    edge, _ = lower(q, (x,), spec)
    got = op_tests._outputs(run_pte(edge.to_executorch().buffer, [x]))
    with torch.no_grad():
        want = op_tests._outputs(q(x))
    worst, unit = op_tests.compare(got, want, io_quantization(edge))
    assert worst == 0, (kind, target, on_cpu, worst, unit)


CASES = dict(
    kind=st.sampled_from(sorted(KINDS)),
    batch=st.integers(1, 2),
    channels=st.integers(1, 5),
    h=st.integers(1, 5),
    w=st.integers(2, 6),
    target=st.sampled_from(["ethos-u55-128", "ethos-u85-128"]),
    on_cpu=st.booleans(),
)


def test_channels_last_pixel_shuffle_on_the_cpu(monkeypatch):
    """Upstream's failing case, small: a channels-last pixel shuffle Vela does not compile."""
    _check("pixel_shuffle", 1, 3, 6, 8, "ethos-u55-128", True, monkeypatch)


@pytest.mark.slow
@settings(max_examples=24, **SETTINGS)
@given(**CASES)
@example(kind="permute", batch=1, channels=3, h=2, w=3, target="ethos-u85-128", on_cpu=False)
# Contiguous to torch (size-1 dims), channels-last to ExecuTorch (its strides): error 0x12.
@example(kind="permute", batch=1, channels=1, h=1, w=2, target="ethos-u55-128", on_cpu=False)
def test_channels_last_reorderings_read_what_eager_reads_many(
    kind, batch, channels, h, w, target, on_cpu
):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _check(kind, batch, channels, h, w, target, on_cpu, monkeypatch)
