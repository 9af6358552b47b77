# SPDX-License-Identifier: BSD-3-Clause
"""ops_to_not_decompose: when every node of a kept op would pass upstream's per-node filter, the
partitioner says so with no filter, and executorch decomposes the program at most twice instead
of three times. When the answer differs per node, the filter stays and the decision is per node."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import calibration_batches
from executorch.exir import to_edge_transform_and_lower
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

    input_shape = (1, 3, 16, 16)

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.c2 = nn.Conv2d(8, 8, 3, padding=(1, 2), dilation=(1, 2), groups=4)
        self.c3 = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 3, 2, 1)
        return F.max_pool2d(self.c3(F.relu(self.c2(x))), 2)


class AttentionHead(nn.Module):
    """Reshapes of permuted (non-contiguous) tensors, transpose, flatten and a matmul: the
    views of timm's attention code, which edge generation otherwise decomposes in a retrace."""

    input_shape = (1, 8, 4, 4)

    def __init__(self):
        super().__init__()
        self.qkv = nn.Conv2d(8, 24, 1)
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(x).reshape(b, 3, 2, 4, h * w).permute(1, 0, 2, 4, 3).unbind(0)
        a = (q @ k.transpose(-2, -1)).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(b, h * w, c)
        return self.proj(y).flatten(1)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("model_cls", [SmallResNetStem, AttentionHead])
def test_one_decomposition_and_the_same_program(monkeypatch, target, model_cls):
    """DecomposeInPlacePass decomposes, node by node, what executorch would retrace the program
    for: one whole-program decomposition (functionalize) instead of two, and the same .pte
    bytes as with the pass off."""
    from ethosu_ng.passes.decompose_in_place import DecomposeInPlacePass

    torch.manual_seed(0)
    model, x = model_cls().eval(), (torch.randn(*model_cls.input_shape),)
    spec = EthosUNGCompileSpec(target)
    q = quantize(model, x, spec, calibration=calibration_batches(x))
    calls = _count_decompositions(monkeypatch)
    real = DecomposeInPlacePass.__call__
    ptes = {}
    for on in (True, False):
        calls.clear()
        monkeypatch.setattr(DecomposeInPlacePass, "__call__", real if on else lambda s, p: p)
        part = EthosUNGPartitioner(spec)
        edge = to_edge_transform_and_lower(torch.export.export(q, x), partitioner=[part])
        ptes[on] = (len(calls), edge.to_executorch().buffer)
    assert ptes[True][0] == 1 and ptes[False][0] == 2, (ptes[True][0], ptes[False][0])
    assert ptes[True][1] == ptes[False][1]
