# SPDX-License-Identifier: BSD-3-Clause
"""A 3-D convolution the target will not take, written as 2-D convolutions for the CPU.

ExecuTorch's portable convolution kernel takes 3-D and 4-D inputs only ("Expect input tensor to
be 3-D or 4-D"), so a ``conv3d`` left on the CPU loads but fails at execute. Ethos-U55 has no
CONV3D: upstream lowers a ``conv3d`` there only as a 2-D convolution over depth-folded batches,
with depth kernel 1 and depth stride 1 (``convolution_support.py``: "Convolution3d needs to have
kernel_z==1", "only supports stride_z<=1"). Any other ``conv3d`` on a U55 is written here as one
2-D convolution per depth tap over the depth-strided slices folded into the batch, summed:
``y[:, :, d] = sum_k conv2d(x_padded[:, :, d * stride + k * dilation], w[:, :, k])``.
The sum is in float (the convolution is between a dequantize and a quantize on the CPU), in
another order than one conv3d's, so an output may round to the neighbouring code.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.export import ExportedProgram

from ethosu_ng.adapters import exir
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.decompose_in_place import DecomposeInPlacePass

aten = torch.ops.aten


def _triple(v) -> Sequence[int]:
    return [int(v)] * 3 if isinstance(v, int) or len(v) == 1 else [int(x) for x in v]


def _conv3d_as_conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    stride, padding, dilation = _triple(stride), _triple(padding), _triple(dilation)
    n, c, depth = x.shape[:3]
    kd = weight.shape[2]
    if padding[0]:
        x = aten.constant_pad_nd.default(x, [0, 0, 0, 0, padding[0], padding[0]], 0.0)
        depth += 2 * padding[0]
    d_out = (depth - dilation[0] * (kd - 1) - 1) // stride[0] + 1
    out = None
    for k in range(kd):
        start = k * dilation[0]
        xs = x[:, :, start : start + stride[0] * (d_out - 1) + 1 : stride[0]]
        xs = xs.permute(0, 2, 1, 3, 4).reshape(n * d_out, c, x.shape[3], x.shape[4])
        y = aten.conv2d.default(
            xs,
            weight[:, :, k],
            bias if k == 0 else None,
            stride[1:],
            padding[1:],
            dilation[1:],
            groups,
        )
        out = y if out is None else out + y
    return out.reshape(n, d_out, *out.shape[1:]).permute(0, 2, 1, 3, 4)


def _kept_by_target(node: torch.fx.Node) -> bool:
    """Upstream's Ethos-U55 conditions for a conv3d it lowers (as a 2-D convolution)."""
    weight = node.args[1].meta["val"]
    stride = _triple(node.args[3] if len(node.args) > 3 else 1)
    return weight.shape[2] == 1 and stride[0] <= 1


class Conv3dOnCpuPass(ProgramPass):
    modifies = frozenset({Aspect.CPU_CONVOLUTIONS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        from ethosu_ng.adapters import arm as upstream

        self.rewritten = []
        if not upstream.lacks_conv3d(self.spec):
            return program
        graph = program.graph_module.graph
        todo = [
            n
            for n in graph.nodes
            if n.op == "call_function"
            and n.target == aten.conv3d.default
            and not _kept_by_target(n)
        ]
        if not todo:
            return program
        splicer = DecomposeInPlacePass(exir.decomposition_table())
        for node in todo:
            name = node.name
            if splicer.splice(graph, node, _conv3d_as_conv2d):
                self.rewritten.append(name)
        if self.rewritten:
            graph.lint()
            program.graph_module.recompile()
        return program
