# SPDX-License-Identifier: BSD-3-Clause
"""op_numerics.check_ops: TOSA against the quantized graph evaluated in float64, and per quantize
op the float32 (eager) vs float64 difference from identical integer inputs."""

import torch
import torch.nn as nn
from conftest import calibration_batches

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.op_numerics import check_ops, exact_outputs

qd = torch.ops.quantized_decomposed
aten = torch.ops.aten

# A near-tie found by search: (-6 * A + 82 * B) / C = 86.50000036 (exact rational arithmetic on
# these doubles), so the correctly rounded result is 87; float32 computes 86.
A, B, C = 0.013498382261231665, 0.025276319267505107, 0.02302506217464817


class QuantizedAdd(nn.Module):
    def forward(self, x, y):
        s = aten.add.Tensor(
            qd.dequantize_per_tensor.default(x, A, 0, -128, 127, torch.int8),
            qd.dequantize_per_tensor.default(y, B, 0, -128, 127, torch.int8),
        )
        return qd.quantize_per_tensor.default(s, C, 0, -128, 127, torch.int8)


def test_float32_rounds_a_near_tie_the_wrong_way_and_float64_does_not():
    gm = torch.fx.symbolic_trace(QuantizedAdd())
    x = torch.tensor([-6, 10], dtype=torch.int8)
    y = torch.tensor([82, 10], dtype=torch.int8)
    eager = gm(x, y)
    exact, ops = exact_outputs(gm, [x, y])
    assert eager.tolist() == [86, 17]
    assert exact[0].tolist() == [87, 17]
    assert [(o.max_lsb, o.elements_off, o.numel) for o in ops] == [(1, 1, 2)]
    assert ops[0].op == "aten.add.Tensor"


class ConvSiluBlock(nn.Module):
    """A MobileNetV2-like block: pointwise conv, SiLU, depthwise conv, SiLU, projection,
    residual."""

    def __init__(self):
        super().__init__()
        self.pw = nn.Conv2d(8, 32, 1)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.proj = nn.Conv2d(32, 8, 1)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.proj(self.act(self.dw(self.act(self.pw(x)))))


def test_tosa_is_bit_exact_against_the_float64_evaluation():
    model = ConvSiluBlock().eval()
    x = (torch.randn(1, 8, 24, 24),)
    spec = EthosUNGCompileSpec("ethos-u85-256", embed_tosa=True)
    q = quantize(model, x, spec, calibration=calibration_batches(x))
    edge, _ = lower(q, x, spec)
    results = check_ops(edge, x)
    assert len(results) == 1
    r = results[0]
    assert r.tosa_vs_exact == [0]
    assert r.lowering_worst == 0
    # one record per quantize in the partition (the input's quantize runs on the CPU side)
    assert [o.op.split(".")[1] for o in r.ops] == [
        "convolution",
        "silu",
        "convolution",
        "silu",
        "convolution",
        "add",
    ]
    assert all(o.max_lsb <= 1 for o in r.ops)
    assert r.outputs_exact[0].dtype == torch.int8


class ConvSiluPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 64, 1)
        self.pool = nn.AvgPool2d(8)

    def forward(self, x):
        return self.pool(nn.functional.silu(self.conv(x))).flatten(1)


def test_avg_pool_ties_round_half_up_in_tosa_and_half_to_even_in_the_reference():
    """The one place TOSA and the float64 evaluation part: a window sum of k * 64 + 32 (about one
    window in 64; here 1024 windows). 1 LSB, a rounding rule, not a lowering defect."""
    model = ConvSiluPool().eval()
    x = (torch.randn(1, 16, 32, 32),)
    spec = EthosUNGCompileSpec("ethos-u85-256", embed_tosa=True)
    q = quantize(model, x, spec, calibration=calibration_batches(x))
    edge, _ = lower(q, x, spec)
    (r,) = check_ops(edge, x)
    assert r.tosa_vs_exact == [1]
    pool = [o for o in r.ops if "avg_pool2d" in o.op]
    assert len(pool) == 1 and pool[0].max_lsb <= 1
