# SPDX-License-Identifier: BSD-3-Clause
"""Property: for random small quantized graphs with a random set of ops pinned to the CPU, the
boundary contract holds and every delegate matches the eager quantized model within 1 LSB.

CI runs 50 examples; ``-m slow`` runs 300.
"""

import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates
from ethosu_ng.ops import node_op_name
from ethosu_ng.partitioning.boundary import float_boundary_tensors

C, H, W = 8, 6, 6

BLOCKS = {
    "conv": lambda m: nn.Conv2d(C, C, 3, padding=1),
    "dwconv": lambda m: nn.Conv2d(C, C, 3, padding=1, groups=C),
    "linear": lambda m: nn.Linear(W, W),
}


class Block(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        if kind in BLOCKS:
            self.mod = BLOCKS[kind](self)

    def forward(self, x, skip):
        k = self.kind
        if k in BLOCKS:
            return self.mod(x)
        if k == "add":
            return x + skip
        if k == "mul":
            return x * skip
        if k == "relu":
            return F.relu(x)
        if k == "clamp":
            return torch.clamp(x, -0.5, 0.5)
        if k == "hardswish":
            return F.hardswish(x)
        if k == "cat":
            return torch.cat((x[:, : C // 2], skip[:, C // 2 :]), 1)
        if k == "view":
            return x.reshape(1, C, H * W).reshape(1, C, H, W)
        if k == "permute":
            return x.permute(0, 1, 3, 2)
        if k == "split":
            a, b = x.split(C // 2, 1)
            return torch.cat((b, a), 1)
        if k == "slice":
            return torch.cat((x[:, :, 1:], x[:, :, :1]), 2)
        if k == "mean":
            return x - x.mean(dim=(2, 3), keepdim=True)
        if k == "avgpool":
            return F.avg_pool2d(x, 3, 1, 1)
        if k == "maxpool":
            return F.max_pool2d(x, 3, 1, 1)
        if k == "softmax":
            return x.softmax(-1)
        if k == "layer_norm":
            return F.layer_norm(x, (W,))
        raise ValueError(k)


KINDS = [
    "conv",
    "dwconv",
    "linear",
    "add",
    "mul",
    "relu",
    "clamp",
    "hardswish",
    "cat",
    "view",
    "permute",
    "split",
    "slice",
    "mean",
    "avgpool",
    "maxpool",
    "softmax",
    "layer_norm",
]

# Edge-dialect ops these blocks lower to; any subset may be pinned to the CPU.
PINNABLE = [
    "aten.convolution.default",
    "aten.linear.default",
    "aten.add.Tensor",
    "aten.mul.Tensor",
    "aten.relu.default",
    "aten.clamp.default",
    "aten.hardswish.default",
    "aten.cat.default",
    "aten.view_copy.default",
    "aten.permute_copy.default",
    "aten.slice_copy.Tensor",
    "aten.split_with_sizes_copy.default",
    "aten.mean.dim",
    "aten.sub.Tensor",
    "aten.avg_pool2d.default",
    "aten.max_pool2d.default",
    "aten.exp.default",
    "aten.amax.default",
    "aten.sum.dim_IntList",
    "aten.reciprocal.default",
]


class RandomNet(nn.Module):
    def __init__(self, kinds):
        super().__init__()
        self.stem = nn.Conv2d(3, C, 1)
        self.blocks = nn.ModuleList(Block(k) for k in kinds)

    def forward(self, x):
        x = self.stem(x)
        skip = x
        for b in self.blocks:
            x, skip = b(x, skip), x
        return x


# CI's share of the property (about 4 s per lowered graph); the slow variant below draws 300.
N_EXAMPLES = int(os.environ.get("ETHOSU_NG_PROPERTY_EXAMPLES", "8"))


def check_one(kinds, pinned, target, seed):
    torch.manual_seed(seed)
    model = RandomNet(kinds).eval()
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(1, 3, H, W, generator=g),) for _ in range(4)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(model, data[0], spec, calibration=data)
    edge, part = lower(q, data[0], spec, cpu_ops=pinned)
    program = edge.exported_program()
    assert float_boundary_tensors(program) == []
    gm = program.graph_module
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.higher_order.executorch_call_delegate:
            lowered = getattr(gm, n.args[0].target)
            blob = DelegateBlob.from_bytes(lowered.processed_bytes)
            vals = n.meta["val"]
            assert [v.dtype for v in vals] == [s.dtype for s in blob.outputs]
            assert [a.meta["val"].dtype for a in n.args[1:]] == [s.dtype for s in blob.inputs]
            # A pinned op never runs on the NPU: none inside what the delegate was lowered from.
            inside = {node_op_name(m) for m in lowered.original_module.graph.nodes}
            assert not inside & set(pinned), (n.name, sorted(inside & set(pinned)))
    results = check_delegates(edge, data[1])
    for r in results:
        assert r.worst <= 1, (kinds, pinned, target, r.name, r.max_lsb)


graphs = st.tuples(
    st.lists(st.sampled_from(KINDS), min_size=1, max_size=4),
    st.lists(st.sampled_from(PINNABLE), max_size=3, unique=True),
    st.sampled_from(["ethos-u55-128", "ethos-u85-256"]),
    st.integers(0, 2**16),
)


@settings(
    max_examples=N_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(graphs)
def test_random_graphs_keep_the_contract(case):
    check_one(*case)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(graphs)
def test_random_graphs_keep_the_contract_long(case):
    check_one(*case)
