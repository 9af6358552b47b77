# SPDX-License-Identifier: BSD-3-Clause
"""nn.AvgPool2d in every mode PyTorch has (kernel, stride, padding, ceil_mode, count_include_pad,
divisor_override) on the NPU: the delegate is within 1 LSB of the eager quantized op, and on
Ethos-U55/U65 Vela's command stream on the NPU model equals the TOSA reference bit for bit.

Padded average pooling (``count_include_pad=False``, or a ``ceil_mode`` window hanging over the
input's edge) is a TOSA AVG_POOL2D with padding, which Vela emits as a padded hardware average
pool: the NPU divides by the kernel positions inside the IFM (``docs/npu-model.md``, pooling).
``count_include_pad=True`` pads explicitly first (upstream's ``DecomposeAvgPool2dPass``, before
quantization), ``divisor_override`` is a depthwise convolution (``AvgPoolDivisorAsConvPass``) and
a ``ceil_mode`` pool that leaves rows unread is sliced (``AvgPoolCeilModePass``); all are drawn,
and so is the pool's producer: the program input, or an op that lowers to a TOSA TABLE (sigmoid,
tanh, exp), whose output upstream's pipeline keeps float until its table pass runs, after the
pooling decompositions (``adapters.arm._tables_before_pooling``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

import pytest
import torch
import torch.nn.functional as F
from _pte import CrossCheckedMethod
from conftest import calibration_batches
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower, quantize

# U85 streams are not modelled: there the check is TOSA against the eager quantized op.
TARGETS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-128")
EXAMPLES = int(os.environ.get("ETHOSU_NG_AVG_POOL_EXAMPLES", "8"))


@dataclass(frozen=True)
class Case:
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int]
    ceil_mode: bool
    count_include_pad: bool
    divisor_override: Optional[int]
    shape: Tuple[int, int, int, int]
    offset: float  # shifts the input range, so the zero point is not always the same
    producer: str = "input"  # what the pool reads: the input, or a table op of it (PRODUCERS)

    def module(self) -> torch.nn.Module:
        return Pool(
            torch.nn.AvgPool2d(
                self.kernel,
                self.stride,
                self.padding,
                ceil_mode=self.ceil_mode,
                count_include_pad=self.count_include_pad,
                divisor_override=self.divisor_override,
            ),
            self.producer,
        )


PRODUCERS = {"input": lambda x: x, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp}


class Pool(torch.nn.Module):
    # nn.AvgPool2d's own forward names its argument "input"; an exported placeholder of that
    # name does not get integer program IO, so the op is wrapped.
    def __init__(self, pool: torch.nn.Module, producer: str = "input"):
        super().__init__()
        self.pool, self.producer = pool, producer

    def forward(self, x):
        return self.pool(PRODUCERS[self.producer](x))


@st.composite
def cases(draw, max_kernel: int = 3, max_hw: int = 7, max_c: int = 4) -> Case:
    kernel = (draw(st.integers(1, max_kernel)), draw(st.integers(1, max_kernel)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    # PyTorch: padding at most half the kernel.
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    hw = tuple(draw(st.integers(k, max_hw)) for k in kernel)
    divisor = draw(st.one_of(st.none(), st.integers(1, kernel[0] * kernel[1] + 2)))
    return Case(
        kernel,
        stride,
        padding,
        ceil_mode=draw(st.booleans()),
        count_include_pad=draw(st.booleans()),
        divisor_override=divisor,
        shape=(1, draw(st.integers(1, max_c)), *hw),
        offset=draw(st.sampled_from([0.0, 1.5, -2.0])),
        producer=draw(st.sampled_from(sorted(PRODUCERS))),
    )


def lower_and_load(model: torch.nn.Module, shape, offset: float, target: str, describe: str):
    """Quantize (int8 program IO) and lower: everything delegated. Returns the quantized model,
    the program IO and the .pte loaded to run on TOSA and (U55/U65) the NPU model, which must
    agree bit for bit."""
    x = (torch.randn(shape) + offset,)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(
        model,
        x,
        spec,
        calibration=[(t[0] + offset,) for t in calibration_batches(x)],
        input_dtype=torch.int8,
        output_dtype=torch.int8,
    )
    edge, part = lower(q, x, spec)
    report = part.report
    assert report.partitions, f"nothing delegated: {report.cpu_reasons} {describe}"
    assert report.cpu_targets == {}, f"on the CPU: {report.cpu_reasons} {describe}"
    ioq = io_quantization(edge)
    method = CrossCheckedMethod(edge.to_executorch().buffer, target)
    # A typical batch, and one that saturates the input range at both ends.
    return q, ioq, method, (x[0], (x[0] - offset) * 4 + offset)


def check_lowered(model: torch.nn.Module, shape, offset: float, target: str, describe: str):
    """Lowered and run on the host, the output is within 1 LSB of the eager quantized model."""
    q, ioq, method, batches = lower_and_load(model, shape, offset, target, describe)
    for k, xs in enumerate(batches):
        want = ioq.outputs[0].quantize(q(xs))
        (got,) = method.execute([ioq.inputs[0].quantize(xs)], f"input {k} {describe}")
        assert got.shape == want.shape, (got.shape, want.shape, describe)
        lsb = (got.int() - want.int()).abs().max().item()
        assert lsb <= 1, f"input {k}: {lsb} LSB from the eager quantized model {describe}"


def check_case(case: Case, target: str) -> None:
    check_lowered(case.module().eval(), case.shape, case.offset, target, f"{case} on {target}")


# Drawn first whatever the budget: PoolFormer's mode, a ceil_mode window over the edge (with and
# without padding), divisor_override with padding excluded from the count, and ceil_mode with a
# stride above the kernel, which leaves input rows no window reads (in both dims, and in one
# while the other needs the ceil_mode window).
POOLFORMER = Case((3, 3), (1, 1), (1, 1), False, False, None, (1, 4, 6, 6), 0.0)
CEIL_OVERHANG = Case((2, 2), (2, 2), (0, 0), True, True, None, (1, 3, 7, 7), 1.5)
CEIL_PADDED = Case((3, 3), (2, 2), (1, 1), True, False, None, (1, 2, 6, 7), -2.0)
DIVISOR = Case((3, 2), (2, 1), (1, 1), True, False, 4, (1, 2, 5, 6), 0.0)
CEIL_UNREAD = Case((1, 1), (2, 2), (0, 0), True, True, None, (1, 2, 4, 5), 0.0)
CEIL_UNREAD_MIXED = Case((2, 1), (3, 2), (0, 0), True, False, None, (1, 2, 4, 2), 0.0)
# A sigmoid's output padded explicitly (count_include_pad) and pooled: the pad and the pool both
# read a table op's output.
AFTER_SIGMOID = Case((3, 3), (1, 1), (1, 1), False, True, None, (1, 3, 6, 6), 0.0, "sigmoid")


def _property(target: str, max_examples: int, **bounds) -> None:
    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(cases(**bounds))
    @example(POOLFORMER)
    @example(CEIL_OVERHANG)
    @example(CEIL_PADDED)
    @example(DIVISOR)
    @example(CEIL_UNREAD)
    @example(CEIL_UNREAD_MIXED)
    @example(AFTER_SIGMOID)
    def prop(case):
        check_case(case, target)

    prop()


@pytest.mark.parametrize("target", TARGETS)
def test_avg_pool_every_mode_is_exact(target):
    _property(target, EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_avg_pool_every_mode_is_exact_sweep(target):
    _property(target, 40, max_kernel=5, max_hw=12, max_c=20)


class PoolFormerTokenMixer(torch.nn.Module):
    """PoolFormer's token mixer: pool(x) - x, padding left out of each average."""

    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)

    def forward(self, x):
        return self.pool(x) - x


def mixer_reference(ioq, xq: torch.Tensor) -> torch.Tensor:
    """The quantized token mixer evaluated exactly, the pool's ties rounded half up.

    A window of 4 or 6 (a corner or an edge: padding is not counted) averages to x.5 LSB
    exactly; TOSA's AVG_POOL2D rounds that up, PyTorch's float32 lands on either side, and the
    subtraction's output scale (finer than its input's) turns that 1 LSB into 2. So the pool's
    integer output is computed here in integers with TOSA's tie rule, the rest in float64 with
    the model's qparams; the lowered graph must be within 1 LSB of that."""
    i, o = ioq.inputs[0], ioq.outputs[0]
    x = xq.to(torch.float64) - i.zero_point
    total = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False, divisor_override=1)
    count = F.avg_pool2d(torch.ones_like(x), 3, 1, 1, count_include_pad=False, divisor_override=1)
    pooled = torch.floor((2 * total + count) / (2 * count))  # half up, exact in float64
    pooled = torch.clamp(pooled + i.zero_point, -128, 127) - i.zero_point
    diff = (pooled - x) * i.scale
    return torch.clamp(torch.round(diff / o.scale) + o.zero_point, -128, 127).to(torch.int8)


@pytest.mark.parametrize("target", TARGETS)
def test_poolformer_token_mixer(target):
    describe = f"PoolFormer token mixer on {target}"
    _, ioq, method, batches = lower_and_load(
        PoolFormerTokenMixer().eval(), (1, 8, 7, 7), 0.5, target, describe
    )
    for k, xs in enumerate(batches):
        xq = ioq.inputs[0].quantize(xs)
        (got,) = method.execute([xq], f"input {k} {describe}")
        lsb = (got.int() - mixer_reference(ioq, xq).int()).abs().max().item()
        assert lsb <= 1, f"input {k}: {lsb} LSB from the exact quantized mixer {describe}"


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_global_pool_after_a_table_op(target):
    """A classifier head that pools a tanh's output globally (AdaptiveAvgPool2d, an average pool
    over the whole map after upstream's decomposition) stays on the NPU, within 1 LSB."""

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.pool = torch.nn.Conv2d(3, 8, 1), torch.nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            return self.pool(torch.tanh(self.conv(x)))

    check_lowered(Head().eval(), (1, 3, 7, 7), 0.0, target, f"tanh -> global pool on {target}")
