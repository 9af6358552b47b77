# SPDX-License-Identifier: BSD-3-Clause
"""DecomposeInPlacePass against torch's own whole-program decomposition.

Property, over random chains of the ops our programs carry into edge generation (conv2d and
max_pool2d in their argument spellings, reshape of permuted tensors, transpose, flatten, linear,
matmul, chunk, split, _unsafe_view, pad, upsampling, hardswish, in-place activations, layer_norm,
softmax) and shapes: decomposing node by
node and then functionalizing gives the program executorch's two decompositions give (same ops,
same arguments, same order), and leaves nothing for the second one to do."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from ethosu_ng.adapters import exir
from ethosu_ng.passes.decompose_in_place import (
    SPLICED_OPS,
    DecomposeInPlacePass,
    functional_activations,
)

LINEAR = torch.ops.aten.linear.default


def _canonical(program):
    """(op, arguments) per call, a node argument written as the position of its node."""
    nodes = list(program.graph_module.graph.nodes)
    index = {n: k for k, n in enumerate(nodes)}

    def arg(a):
        if isinstance(a, torch.fx.Node):
            return ("node", index[a])
        if isinstance(a, (list, tuple)):
            return [arg(b) for b in a]
        return a

    return [
        (str(n.target), arg(n.args), {k: arg(v) for k, v in n.kwargs.items()})
        for n in nodes
        if n.op == "call_function"
    ]


# Each step maps an NCHW tensor of C channels to an NCHW tensor of C channels.
def _conv(draw, c):
    k = draw(st.integers(1, 3))
    return nn.Conv2d(
        c,
        c,
        k,
        stride=draw(st.sampled_from([1, 2, (2, 1)])),
        padding=draw(st.sampled_from([0, 1, (1, 0)])),
        dilation=draw(st.sampled_from([1, 2])),
        groups=draw(st.sampled_from([1, c])),
        bias=draw(st.booleans()),
    )


STEPS = [
    "conv",
    "max_pool",
    "permute_reshape",
    "transpose",
    "flatten_unflatten",
    "linear",
    "matmul",
    "chunk_cat",
    "unsafe_view",
    "pad",
    "upsample",
    "hardswish",
    "inplace",
    "layer_norm",
    "softmax",
]


class Chain(nn.Module):
    def __init__(self, steps, convs, c):
        super().__init__()
        self.steps = steps
        self.convs = nn.ModuleList(convs)
        self.fc = nn.Linear(c, c)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        convs = iter(self.convs)
        for step, arg in self.steps:
            b, c, h, w = x.shape
            if step == "conv":
                x = next(convs)(x)
            elif step == "max_pool":
                k, stride, ceil = arg
                x = F.max_pool2d(x, k, stride, 0, 1, ceil) if stride else F.max_pool2d(x, k)
            elif step == "permute_reshape":
                # w*h merges into a view; w*c does not: clone + _unsafe_view
                x = x.permute(0, 2, 3, 1).reshape(b, h * w, c).reshape(b, h, w * c)
                x = x.reshape(b, h, w, c).permute(0, 3, 1, 2)
            elif step == "transpose":
                x = x.transpose(2, 3).transpose(-1, -2)
            elif step == "flatten_unflatten":
                x = x.flatten(2).unflatten(2, (h, w))
            elif step == "linear":  # on the channels, a rank-4 input
                x = self.fc(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            elif step == "matmul":  # batched over two dims: bmm between views
                x = x @ x.transpose(-2, -1) @ x
            elif step == "chunk_cat":
                parts = x.chunk(arg, dim=1) if arg < 3 else x.split(c // 2, dim=1)
                x = torch.cat(parts[::-1], dim=1)
            elif step == "unsafe_view":  # as quantization's retrace writes a batched matmul
                x = torch.ops.aten._unsafe_view.default((x * 2).contiguous(), [b, c * h, w]).view(
                    b, c, h, w
                )
            elif step == "pad":
                x = F.pad(x, arg)
            elif step == "upsample":
                x = F.interpolate(x, scale_factor=2, mode="nearest")
            elif step == "hardswish":
                x = F.hardswish(x)
            elif step == "inplace":  # on a fresh tensor, or on one another op also reads
                y = x * 2
                x = arg[0](y, inplace=True) + (y if arg[1] else 0)
            elif step == "layer_norm":
                x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            elif step == "softmax":
                x = x.softmax(arg)
        return x


@st.composite
def chains(draw, first):
    c = draw(st.sampled_from([2, 4]))
    steps, convs = [], []
    for step in [first] + draw(st.lists(st.sampled_from(STEPS), max_size=3)):
        arg = None
        if step == "conv":
            convs.append(_conv(draw, c))
        elif step == "max_pool":
            arg = (
                draw(st.integers(1, 2)),
                draw(st.sampled_from([None, 1, 2])),
                draw(st.booleans()),
            )
        elif step == "chunk_cat":
            arg = draw(st.sampled_from([1, 2, 3]))  # 3: split
        elif step == "pad":
            arg = tuple(
                draw(st.lists(st.integers(0, 1), min_size=2, max_size=2)) * draw(st.integers(1, 2))
            )
        elif step == "softmax":
            arg = draw(st.integers(-4, 3))
        elif step == "inplace":
            arg = (
                draw(st.sampled_from([F.silu, F.hardswish, F.relu, F.hardtanh])),
                draw(st.booleans()),
            )
        steps.append((step, arg))
    h, w = draw(st.integers(5, 9)), draw(st.integers(5, 9))
    return Chain(steps, convs, c).eval(), (torch.randn(1, c, h, w),), steps


@pytest.mark.parametrize("first", STEPS)  # every kind, whatever hypothesis draws after it
@settings(max_examples=2, deadline=None, derandomize=True)
@given(data=st.data(), keep_linear=st.booleans(), stale=st.booleans())
def test_node_by_node_equals_whole_program(first, data, keep_linear, stale):
    model, x, steps = data.draw(chains(first))
    table = exir.decomposition_table()
    if keep_linear:  # a partitioner keeping an op: neither path may touch it
        table.pop(LINEAR)
    want = torch.export.export(model, x).run_decompositions({}).run_decompositions(table)
    decompose = DecomposeInPlacePass(table)
    ep = torch.export.export(model, x)
    if stale:  # as our passes leave them: every computed value claims contiguous strides
        _make_values_contiguous(ep)
    functional_activations(ep)
    got = decompose(ep).run_decompositions({})
    assert all(n.target not in SPLICED_OPS for n in decompose.left), (steps, decompose.left)
    left = [n for n in got.graph.nodes if n.op == "call_function" and n.target in table]
    # What executorch does next: retrace with the table only if an op of it is left.
    assert bool(left) == bool(decompose.left), (steps, left, decompose.left)
    if left:
        got = got.run_decompositions(table)
    assert _canonical(got) == _canonical(want), steps
    assert any(n.target == LINEAR for n in got.graph.nodes) == (
        keep_linear and any(s == "linear" for s, _ in steps)
    )


def test_a_node_whose_trace_holds_a_constant_is_left_to_the_retrace():
    """A decomposition that makes a constant tensor (a get_attr in its trace) cannot be spliced
    exactly: the node stays as it was, and the pass names it."""
    hardswish = torch.ops.aten.hardswish.default

    class Hardswish(nn.Module):
        def forward(self, x):
            return F.hardswish(x) * 2

    table = exir.decomposition_table()
    table[hardswish] = lambda x: x + torch.tensor([1.0, 2.0, 3.0])
    ep = torch.export.export(Hardswish(), (torch.randn(2, 3),))
    before = _canonical(ep)
    decompose = DecomposeInPlacePass(table)
    decompose(ep)
    assert [n.target for n in decompose.left] == [hardswish]
    assert _canonical(ep) == before


def test_every_spliced_op_is_exercised_and_spliced():
    """One chain of every step: each op of SPLICED_OPS occurs and is spliced, so the property
    above covers the whole list."""
    steps = (
        [("conv", None), ("max_pool", (2, None, False))]
        + [
            (s, {"chunk_cat": 3, "pad": (1, 0), "softmax": 1, "inplace": (F.silu, False)}.get(s))
            for s in STEPS[2:]
        ]
        + [("chunk_cat", 2)]
    )
    model = Chain(steps, [nn.Conv2d(4, 4, 3, padding=1)], 4).eval()
    ep = torch.export.export(model, (torch.randn(1, 4, 8, 8),))
    present = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert present >= SPLICED_OPS, SPLICED_OPS - present
    decompose = DecomposeInPlacePass(exir.decomposition_table())
    decompose(ep)
    assert decompose.decomposed > 0 and not SPLICED_OPS & {n.target for n in decompose.left}
    assert not SPLICED_OPS & {n.target for n in ep.graph.nodes if n.op == "call_function"}


def _make_values_contiguous(ep):
    for n in ep.graph.nodes:
        v = n.meta.get("val")
        if n.op == "call_function" and isinstance(v, torch.Tensor):
            with v.fake_mode:
                n.meta["val"] = torch.empty(v.shape, dtype=v.dtype)


def test_stale_strides_left_by_earlier_passes_do_not_decide_the_trace():
    """Graph passes rewire nodes without recomputing the values downstream; a reshape is a view
    or a copy by its input's real strides. A permute whose stored value claims contiguous
    strides still gives the retrace's clone + view."""

    class PermuteReshape(nn.Module):
        def forward(self, x):
            return x.permute(0, 2, 1).reshape(2, 12) * 2

    x = (torch.randn(2, 3, 4),)
    table = exir.decomposition_table()
    want = torch.export.export(PermuteReshape(), x).run_decompositions({})
    want = want.run_decompositions(table)
    ep = torch.export.export(PermuteReshape(), x)
    _make_values_contiguous(ep)  # the permute's value now claims contiguous strides
    got = DecomposeInPlacePass(table)(ep).run_decompositions({})
    assert _canonical(got) == _canonical(want)
    assert any(n.target == torch.ops.aten.clone.default for n in got.graph.nodes)


def test_symbolic_shapes_are_left_to_the_retrace():
    """With a dynamic dimension nothing is spliced (the cached traces are per static shape);
    the program is unchanged and executorch's retrace decomposes it."""

    class TransposeReshape(nn.Module):
        def forward(self, x):
            return x.transpose(1, 2).reshape(x.shape[0], -1)

    batch = torch.export.Dim("batch", min=2, max=8)
    ep = torch.export.export(
        TransposeReshape(), (torch.randn(4, 3, 5),), dynamic_shapes=({0: batch},)
    )
    before = _canonical(ep)
    decompose = DecomposeInPlacePass(exir.decomposition_table())
    decompose(ep)
    assert decompose.decomposed == 0
    assert "aten.transpose.int" in [str(n.target) for n in decompose.left]
    assert _canonical(ep) == before
