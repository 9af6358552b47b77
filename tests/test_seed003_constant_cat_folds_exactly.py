# SPDX-License-Identifier: BSD-3-Clause
"""Seed 003: a quantized cat of constants folds to exactly the eager quantized values.

Upstream's FoldAndAnnotateQParamsPass keeps one input-qparams entry per *argument index*; for a
list argument (cat's tensors) the elements' qparams are merged into that one entry, so folding
cat((a, b, c)) with different qparams is wrong there (68 LSB measured). FoldQuantizedConstantsPass
folds every constant quantized cone in PyTorch first. The class (2-5 constants, any axis, mixed
qparams, both families, host numerics) is tests/test_property_seed003.py; here the seed's recipe
through the quantizer and the premises.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from _pte import CrossCheckedMethod
from executorch.exir import to_edge_transform_and_lower
from tosa.TosaGraph import TosaGraph

from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner
from ethosu_ng.adapters import arm as upstream
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates

qd = torch.ops.quantized_decomposed
I8 = (-128, 127, torch.int8)
H, W = 4, 5


def q(t, s, zp):
    return qd.quantize_per_tensor(t, s, zp, *I8)


def dq(t, s, zp):
    return qd.dequantize_per_tensor(t, s, zp, *I8)


def ramps():
    h = torch.linspace(-1 + 1 / W, 1 - 1 / W, W).view(1, 1, 1, W).expand(1, 1, H, W).contiguous()
    v = torch.linspace(-1 + 1 / H, 1 - 1 / H, H).view(1, 1, H, 1).expand(1, 1, H, W).contiguous()
    return h, v


class QuantizedConstCat(nn.Module):
    """A converted-PT2E-shaped graph: int8 constants, each with its own qparams, cat, then + x."""

    OUT = (0.08, 2)

    def __init__(self, tensors, qparams):
        super().__init__()
        self.qparams = qparams
        for k, (t, (s, zp)) in enumerate(zip(tensors, qparams)):
            self.register_buffer(f"c{k}", q(t, s, zp))

    def cat_reference(self):
        parts = [dq(getattr(self, f"c{k}"), s, zp) for k, (s, zp) in enumerate(self.qparams)]
        return q(torch.cat(parts, 1), *self.OUT)

    def forward(self, x):
        cat = dq(self.cat_reference(), *self.OUT)
        return dq(q(dq(q(x, 0.02, 0), 0.02, 0) + cat, 0.1, 0), 0.1, 0)


def lower_handbuilt(model, x, target, disabled_passes=(), verify_lowering=True):
    ep = torch.export.export(model, x)
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target in (
            torch.ops.aten.cat.default,
            torch.ops.aten.add.Tensor,
        ):
            upstream.mark_quantized(n)
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_lowering=verify_lowering)
    partitioner = EthosUNGPartitioner(spec, disabled_passes=disabled_passes)
    return to_edge_transform_and_lower(ep, partitioner=[partitioner])


def folded_constants(blob):
    block = TosaGraph.GetRootAs(bytearray(blob.tosa), 0).Regions(0).Blocks(0)
    out = {}
    for k in range(block.TensorsLength()):
        t = block.Tensors(k)
        if t.DataLength() and t.Type() == 3:  # INT8
            out[t.Name().decode()] = (
                tuple(t.ShapeAsNumpy()),
                np.frombuffer(t.DataAsNumpy().tobytes(), np.int8),
            )
    return out


h, v = ramps()
CASES = {
    "h_v_ramps": ([h, v], [(1 / 127, 0), (1 / 127, 0)]),
    "three_inputs_different_qparams": (
        [h, 10 * v, 0.1 * h],
        [(1 / 127, 0), (10 / 127, 3), (0.1 / 127, -5)],
    ),
    "repeated_input": ([h, h, v], [(1 / 127, 0), (1 / 127, 0), (0.5 / 127, 7)]),
}


def test_seed_recipe_through_the_quantizer():
    """The seed's h/v ramp cat, quantized by EthosUNGQuantizer: delegate equals the eager model."""

    class CatConstantModel(nn.Module):
        def forward(self, x):
            h, v = ramps()
            return torch.cat((h, v), dim=1) + x

    x = (torch.randn(1, 2, H, W),)
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    qm = quantize(CatConstantModel(), x, spec)
    edge, part = lower(qm, x, spec)
    assert list(part.report.partitions) == ["ethosu_ng_0"]
    feeds = [x, (torch.randn(1, 2, H, W),)]
    for inputs in feeds:
        assert max(r.worst for r in check_delegates(edge, inputs)) == 0
    method = CrossCheckedMethod(edge.to_executorch().buffer, spec.target)
    for inputs in feeds:
        method.execute(inputs)  # NPU model == TOSA reference model, bit for bit


def test_upstream_list_argument_convention_is_pinned():
    """Upstream records ONE qparams entry for cat's list argument (argument-index convention): the
    first element's, whatever the others' are, so folding cat((a, b)) reads b with a's qparams.
    If this changes, FoldQuantizedConstantsPass's reason to exist must be re-checked."""
    from executorch.exir.dialects._ops import ops as exir_ops

    edge_dq = exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default
    g = torch.fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    da = g.call_function(edge_dq, (a, 0.1, 0, *I8))
    db = g.call_function(edge_dq, (b, 0.1, 0, *I8))
    assert upstream.list_argument_input_qparams([da, db]) == pytest.approx((0.1, 0))
    db.args = (b, 0.5, 3, *I8)
    # Two different element qparams, one entry: the first element's, in either order.
    assert upstream.list_argument_input_qparams([da, db]) == pytest.approx((0.1, 0))
    assert upstream.list_argument_input_qparams([db, da]) == pytest.approx((0.5, 3))


def test_without_our_fold_upstream_folds_wrong():
    """The premise: disable our two passes and upstream's fold is off by many LSB."""
    from ethosu_ng.passes import FoldQuantizedConstantsPass, UnifyConcatQParamsPass

    tensors, qparams = CASES["three_inputs_different_qparams"]
    model = QuantizedConstCat(tensors, qparams)
    x = (torch.randn(1, 3, H, W),)
    disabled = [FoldQuantizedConstantsPass, UnifyConcatQParamsPass]
    # The lowering check would keep the wrong fold off the NPU (test_verified_compile.py).
    edge = lower_handbuilt(
        model, x, "ethos-u55-128", disabled_passes=disabled, verify_lowering=False
    )
    assert max(r.worst for r in check_delegates(edge, x)) > 1
