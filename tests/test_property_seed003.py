# SPDX-License-Identifier: BSD-3-Clause
"""Seed 003 as a property: a quantized ``cat`` of 2-5 constants, each with its own qparams, along
any axis, folds to exactly the eager quantized values and the model runs within 1 LSB of the eager
quantized model on the host runtime; no cat (or other compute) on the CPU; on both families.

The model is a converted-PT2E-shaped graph built by hand (a quantizer would give every input of a
cat the same qparams, and the class is about cats whose inputs differ). Its float program IO
quantize/dequantize run on the CPU; nothing else may. Drawn: number of constants, the axis, each
constant's extent along it and its qparams, the consumer of the folded cat (add or mul with the
input), the shape.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from _pte import CrossCheckedMethod
from executorch.exir import to_edge_transform_and_lower
from hypothesis import strategies as st
from seed_property import DEPTHS, TARGETS, blob_io_matches_parent, run_per_family
from test_seed003_constant_cat_folds_exactly import folded_constants

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec, EthosUNGPartitioner, io_quantization
from ethosu_ng.adapters import arm as upstream
from ethosu_ng.partitioning.boundary import float_boundary_tensors

qd = torch.ops.quantized_decomposed
I8 = (-128, 127, torch.int8)


def q(t, s, zp):
    return qd.quantize_per_tensor(t, s, zp, *I8)


def dq(t, s, zp):
    return qd.dequantize_per_tensor(t, s, zp, *I8)


def _qparams_for(lo: float, hi: float):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-3) / 255
    zp = int(round(-128 - lo / scale))
    return float(scale), max(-128, min(127, zp))


class ConstCat(nn.Module):
    def __init__(self, consts, qparams, axis, use, x_qp, out_qp):
        super().__init__()
        self.qparams, self.axis, self.use = qparams, axis, use
        self.x_qp, self.out_qp = x_qp, out_qp
        for k, (t, (s, zp)) in enumerate(zip(consts, qparams)):
            self.register_buffer(f"c{k}", q(t, s, zp))
        parts = [dq(getattr(self, f"c{k}"), s, zp) for k, (s, zp) in enumerate(qparams)]
        cat = torch.cat(parts, axis)
        self.cat_qp = _qparams_for(cat.min().item(), cat.max().item())

    def cat_reference(self):
        parts = [dq(getattr(self, f"c{k}"), s, zp) for k, (s, zp) in enumerate(self.qparams)]
        return q(torch.cat(parts, self.axis), *self.cat_qp)

    def forward(self, x):
        cat = dq(self.cat_reference(), *self.cat_qp)
        xq = dq(q(x, *self.x_qp), *self.x_qp)
        y = xq + cat if self.use == "add" else xq * cat
        return dq(q(y, *self.out_qp), *self.out_qp)


@st.composite
def cases(draw):
    n = draw(st.integers(2, 5))
    rank4 = [1, draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    axis = draw(st.integers(1, 3))
    extents = [draw(st.integers(1, 3)) for _ in range(n)]
    qparams = [
        (draw(st.sampled_from([0.004, 0.01, 0.03, 0.07])), draw(st.integers(-20, 20)))
        for _ in range(n)
    ]
    return dict(
        shape=tuple(rank4),
        axis=axis,
        extents=tuple(extents),
        qparams=tuple(qparams),
        use=draw(st.sampled_from(["add", "mul"])),
        seed=draw(st.integers(0, 2**16)),
    )


def build(case):
    g = torch.Generator().manual_seed(case["seed"])
    consts = []
    for e, (s, zp) in zip(case["extents"], case["qparams"]):
        shape = list(case["shape"])
        shape[case["axis"]] = e
        # Values over (and a little past) each constant's own representable range.
        lo, hi = (-128 - zp) * s, (127 - zp) * s
        consts.append(torch.rand(shape, generator=g) * (hi - lo) * 1.1 + lo * 1.05)
    out_shape = list(case["shape"])
    out_shape[case["axis"]] = sum(case["extents"])
    xs = [torch.randn(out_shape, generator=g) for _ in range(4)]
    x_qp = _qparams_for(min(x.min().item() for x in xs), max(x.max().item() for x in xs))
    model = ConstCat(consts, case["qparams"], case["axis"], case["use"], x_qp, (1.0, 0))
    cat = dq(model.cat_reference(), *model.cat_qp)
    ys = [
        (dq(q(x, *x_qp), *x_qp) + cat) if case["use"] == "add" else dq(q(x, *x_qp), *x_qp) * cat
        for x in xs
    ]
    model.out_qp = _qparams_for(min(y.min().item() for y in ys), max(y.max().item() for y in ys))
    return model, xs


def check_case(case, target):
    model, xs = build(case)
    ep = torch.export.export(model, (xs[0],))
    for n in ep.graph.nodes:  # what the quantizer's annotation marks in a real flow
        if n.op == "call_function" and n.target in (
            torch.ops.aten.cat.default,
            torch.ops.aten.add.Tensor,
            torch.ops.aten.mul.Tensor,
        ):
            upstream.mark_quantized(n)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    part = EthosUNGPartitioner(spec)
    edge = to_edge_transform_and_lower(ep, partitioner=[part])
    describe = f"{case} {target}"
    program = edge.exported_program()
    assert len(part.report.partitions) == 1, describe
    on_cpu = {t for t in part.report.cpu_targets.values() if "quantize" not in t}
    assert on_cpu == set(), (part.report.cpu_reasons, describe)
    assert float_boundary_tensors(program) == []
    assert blob_io_matches_parent(program) == 1
    blob = DelegateBlob.from_bytes(program.graph_module.lowered_module_0.processed_bytes)
    want_cat = model.cat_reference().flatten().numpy().astype(np.int32)
    consts = [a for _, a in folded_constants(blob).values() if a.size == want_cat.size]
    assert consts, f"folded cat constant not found in the TOSA graph {describe}"
    # The folded constant holds exactly the eager quantized cat.
    assert min(int(np.abs(a.astype(np.int32) - want_cat).max()) for a in consts) == 0, describe
    grid = io_quantization(edge).outputs[0].grid_scale
    method = CrossCheckedMethod(edge.to_executorch().buffer, spec.target)
    for x in xs[1:]:
        got = method.execute([x], describe)[0]
        lsb = ((got - model(x)).abs().max() / grid).item()
        assert lsb <= 1.0001, f"{lsb} LSB {describe}"


@pytest.mark.parametrize("examples", DEPTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_constant_cat(target, examples):
    run_per_family(cases(), check_case, target, examples)
