# SPDX-License-Identifier: BSD-3-Clause
"""Slicing q/k/v out of a rank-5 tensor runs on the NPU for ethos-u55-128 (SliceOnMergedAxisPass).

Without the pass, Vela 5.1.0 SIGSEGVs on swin's window attention for U55 (rank-5 SLICE of the
outer dim -> RESHAPE to rank 4 -> MUL) and TargetLimits had to keep q, k, v on the CPU."""

import pytest
import torch
import torch.nn as nn

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates
from ethosu_ng.partitioning.boundary import float_boundary_tensors
from ethosu_ng.passes import SliceOnMergedAxisPass

aten = torch.ops.aten


class WindowAttention(nn.Module):
    """timm's swin WindowAttention in miniature: windows x heads > 1, unbind(0), relative bias."""

    def __init__(self, dim=16, heads=2, tokens=16):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias = nn.Parameter(torch.randn(heads, tokens, tokens) * 0.1)

    def forward(self, x):  # (windows, tokens, dim)
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        att = (q * self.scale) @ k.transpose(-2, -1) + self.bias
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(y)


def test_window_attention_is_one_partition_on_u55():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn((4, 16, 16), generator=g),) for _ in range(3)]
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    q = quantize(WindowAttention().eval(), data[0], spec, calibration=data)
    edge, part = lower(q, data[0], spec)
    compute_on_cpu = {n: t for n, t in part.report.cpu_targets.items() if "quantize" not in t}
    assert len(part.report.partitions) == 1, part.report.cpu_reasons
    assert compute_on_cpu == {}, part.report.cpu_reasons
    assert float_boundary_tensors(edge.exported_program()) == []
    for x in data[1:]:
        assert max(r.worst for r in check_delegates(edge, x)) <= 1


SLICINGS = {
    "select_outer": lambda x: x[1],
    "select_negative": lambda x: x[:, -1],
    "slice_middle": lambda x: x[:, :, 1:3],
    "slice_one_strided_row": lambda x: x[2::5],
    "unbind": lambda x: torch.stack(x.unbind(0)[::-1], -1),
    "split": lambda x: x.split([1, 2], 0)[1] * 2,
    "chunk_middle": lambda x: x.chunk(2, 1)[1],
}


class Slicing(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x.permute(1, 0, 2, 3, 4) + 1)


@pytest.mark.parametrize("case", sorted(SLICINGS))
def test_rewrite_is_exact_and_leaves_no_rank5_slicing(case):
    x = torch.randn(4, 3, 3, 5, 6)
    program = torch.export.export(Slicing(SLICINGS[case]), (x,))
    expected = program.module()(x)
    p = SliceOnMergedAxisPass()
    program = p(program)
    assert p.rewritten >= 1
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target in (
            aten.select.int,
            aten.slice.Tensor,
            aten.unbind.int,
            aten.split.Tensor,
            aten.split_with_sizes.default,
            aten.chunk.default,
        ):
            assert node.args[0].meta["val"].dim() <= 3, node.format_node()
    assert torch.equal(program.module()(x), expected)


def test_inner_dims_and_strided_slices_are_left_alone():
    x = torch.randn(3, 4, 2, 5, 6)
    program = torch.export.export(
        Slicing(lambda x: x[..., 1].sum() + x[:, :, :, 2].sum() + x[::2].sum()), (x,)
    )
    p = SliceOnMergedAxisPass()
    p(program)
    assert p.rewritten == 0
