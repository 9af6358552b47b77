"""ops_to_not_decompose: when every node of a kept op would pass upstream's per-node filter, the
partitioner says so with no filter, and executorch decomposes the program at most twice instead
of three times. When the answer differs per node, the filter stays and the decision is per node."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import calibration_batches
from executorch.exir import to_edge_transform_and_lower
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.export import ExportedProgram

from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner
from ethosu_ng.adapters import arm as upstream
from ethosu_ng.export import quantize

LINEAR = torch.ops.aten.linear.default
HARDSWISH = torch.ops.aten.hardswish.default


class LinearHardswish(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(F.hardswish(self.fc1(x)))


def _quantized_program():
    torch.manual_seed(0)
    model, x = LinearHardswish().eval(), (torch.randn(2, 16),)
    spec = EthosUNGCompileSpec("ethos-u55-128")
    q = quantize(model, x, spec, calibration=calibration_batches(x))
    return torch.export.export(q, x), spec


def _count_decompositions(monkeypatch):
    calls = []
    orig = ExportedProgram.run_decompositions

    def counting(self, *a, **k):
        calls.append(1)
        return orig(self, *a, **k)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", counting)
    return calls


def test_all_nodes_quantized_means_no_filter_and_at_most_two_decompositions(monkeypatch):
    ep, spec = _quantized_program()
    part = EthosUNGPartitioner(spec)
    ops, filter_fn = part.ops_to_not_decompose(part.transform_for_pre_decomposition(ep))
    assert filter_fn is None
    assert set(ops) == {LINEAR, HARDSWISH}  # only the kept ops the graph holds

    ep, spec = _quantized_program()
    calls = _count_decompositions(monkeypatch)
    part = EthosUNGPartitioner(spec)
    edge = to_edge_transform_and_lower(ep, partitioner=[part])
    # functionalize, plus a table pass only if the graph holds an op to decompose; the
    # filter path costs three.
    assert 1 <= len(calls) <= 2, f"expected at most two decompositions, got {len(calls)}"
    # linear and hardswish were kept whole and delegated: nothing but the delegate computes.
    gm = edge.exported_program().graph_module
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert any("executorch_call_delegate" in t for t in targets)
    assert not any("linear" in t or "hardswish" in t or "addmm" in t for t in targets), targets
    assert len(part.report.partitions) == 1


def test_mixed_nodes_keep_the_per_node_filter():
    """One linear between DQ and Q, one in float: the answer differs per node, so the filter
    stays (executorch then decomposes the float one and keeps the quantized one)."""
    ep, spec = _quantized_program()
    part = EthosUNGPartitioner(spec)
    program = part.transform_for_pre_decomposition(ep)
    g = program.graph_module.graph
    first_linear = next(n for n in g.nodes if n.target == LINEAR)
    # Add a float linear on the program input (the filter is asked about each node by itself).
    x = next(
        n
        for n in g.nodes
        if n.op == "placeholder"
        and n.name not in program.graph_signature.inputs_to_parameters
        and n.name not in program.graph_signature.inputs_to_buffers
    )
    with g.inserting_after(first_linear):
        float_linear = g.call_function(LINEAR, (x, first_linear.args[1]))
    float_linear.meta = dict(first_linear.meta)
    ops, filter_fn = part.ops_to_not_decompose(program)
    assert filter_fn is not None
    assert LINEAR in ops
    assert filter_fn(first_linear) and not filter_fn(float_linear)


def test_pinned_op_is_never_kept():
    ep, spec = _quantized_program()
    part = EthosUNGPartitioner(spec, cpu_ops=["aten.linear.default"])
    ops, filter_fn = part.ops_to_not_decompose(part.transform_for_pre_decomposition(ep))
    assert LINEAR not in ops and filter_fn is None


def test_both_paths_give_the_same_program(monkeypatch):
    """The no-filter answer is a shortcut, not a different lowering: same .pte bytes as when
    executorch is handed the per-node filter."""

    def pte(force_filter):
        ep, spec = _quantized_program()
        part = EthosUNGPartitioner(spec)
        if force_filter:  # upstream's own answer: its op list and its per-node filter
            monkeypatch.setattr(
                EthosUNGPartitioner,
                "ops_to_not_decompose",
                lambda self, program: upstream.ops_to_not_decompose(spec, program),
            )
        out = to_edge_transform_and_lower(ep, partitioner=[part]).to_executorch().buffer
        monkeypatch.undo()
        return out

    assert pte(force_filter=False) == pte(force_filter=True)


class SmallResNetStem(nn.Module):
    """conv2d in its argument spellings (defaults omitted, stride/padding pairs, groups, no
    bias) and max_pool2d with and without an explicit stride."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.c2 = nn.Conv2d(8, 8, 3, padding=(1, 2), dilation=(1, 2), groups=4)
        self.c3 = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 3, 2, 1)
        return F.max_pool2d(self.c3(F.relu(self.c2(x))), 2)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_a_cnn_is_decomposed_once_into_the_same_program(monkeypatch, target):
    """CoreAtenFormsPass writes conv2d / max_pool2d as their decomposition would, so executorch
    skips its table retrace: one decomposition (functionalize) instead of two, same .pte bytes
    as with the pass disabled."""
    from ethosu_ng.passes.core_aten_forms import CoreAtenFormsPass

    torch.manual_seed(0)
    model, x = SmallResNetStem().eval(), (torch.randn(1, 3, 16, 16),)
    spec = EthosUNGCompileSpec(target)
    q = quantize(model, x, spec, calibration=calibration_batches(x))
    calls = _count_decompositions(monkeypatch)
    ptes = {}
    for disabled in ([], [CoreAtenFormsPass]):
        calls.clear()
        part = EthosUNGPartitioner(spec, disabled_passes=disabled)
        edge = to_edge_transform_and_lower(torch.export.export(q, x), partitioner=[part])
        assert len(part.report.partitions) == 1
        ptes[bool(disabled)] = (len(calls), edge.to_executorch().buffer)
    assert ptes[False][0] == 1 and ptes[True][0] == 2, ptes
    assert ptes[False][1] == ptes[True][1]


def _ops_and_args(program):
    return [
        (str(n.target), [a.name if hasattr(a, "name") else a for a in n.args[1:]])
        for n in program.graph_module.graph.nodes
        if n.op == "call_function"
    ]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.integers(1, 3),  # kernel
    st.sampled_from([1, 2, (2, 1)]),  # stride
    st.sampled_from([0, 1, (1, 0)]),  # padding
    st.sampled_from([1, 2]),  # dilation
    st.sampled_from([1, 2]),  # groups
    st.booleans(),  # bias
    st.integers(1, 3),  # pool kernel
    st.sampled_from([None, 1, 2]),  # pool stride (None: the kernel)
    st.booleans(),  # ceil_mode
)
def test_core_aten_forms_equal_torchs_own_decomposition(k, s, p, d, g, bias, pk, ps, ceil):
    """Over conv2d / max_pool2d argument spellings: the pass gives the graph torch's
    decomposition table gives (same ops, same arguments), so executorch has nothing left to
    decompose."""
    from executorch.exir.program._program import _default_decomposition_table

    from ethosu_ng.passes.core_aten_forms import CoreAtenFormsPass

    class ConvPool(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(4, 4, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)

        def forward(self, x):
            return (
                F.max_pool2d(self.c(x), pk, ps, 0, 1, ceil)
                if ps
                else F.max_pool2d(self.c(x), pk, ceil_mode=ceil)
            )

    x = (torch.randn(1, 4, 11, 11),)
    ep = torch.export.export(ConvPool().eval(), x)
    want = ep.run_decompositions(_default_decomposition_table())
    got = CoreAtenFormsPass()(torch.export.export(ConvPool().eval(), x)).run_decompositions({})
    assert _ops_and_args(got) == _ops_and_args(want)
    table = _default_decomposition_table()
    assert not any(n.target in table for n in got.graph_module.graph.nodes)
