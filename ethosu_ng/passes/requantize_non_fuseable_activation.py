# SPDX-License-Identifier: BSD-3-Clause
"""Give a conv/linear followed by a non-fuseable relu/hardtanh its own output quantization.

Keeps seed 001's guarantee. Upstream 1.5.1's FuseQuantizedActivationPass fuses ``conv -> relu ->
Q`` at *any* output zero point by setting the quantize's qmin to the zero point, expecting the
conv's output RESCALE to clamp there; but a TOSA RESCALE saturates only to the int8 range. With
the seed's shared cat domain (relu output zp = -111) every negative conv output lands in
[-128, -111) instead of on -111: measured 17 LSB off on the TOSA reference model.

When the activation's quantize has a zero point above the dtype minimum we rewrite

    conv -> relu -> Q(s, zp)    into    conv -> Q(s, zp) -> DQ -> relu -> Q(s, zp)

This is exact in integers: for conv >= 0 both give Q(conv); for conv < 0 both give zp (the
requantized value is <= zp, relu maps it to 0, which quantizes to zp). Upstream then sees a conv
that owns its output qparams and a relu whose input is a dequantize, so it does not fuse; the
relu lowers to an integer CLAMP at the quantized bounds. When the zero point is the dtype
minimum, fusion is exact and the graph is left alone.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.qdq_nodes import insert_qdq

aten = torch.ops.aten
_ACTIVATIONS = (aten.relu.default, aten.relu_.default, aten.hardtanh.default, aten.relu6.default)


def _activation_quantize(act: Node):
    users = list(act.users)
    if (
        len(users) != 1
        or users[0].target != QUANTIZE_PER_TENSOR
        or len(users[0].args) < 6
        or users[0].kwargs
    ):
        return None
    q = users[0]
    zp, dtype = q.args[2], q.args[5]
    if not isinstance(zp, int) or dtype not in (torch.int8, torch.int16):
        return None
    return q if zp != torch.iinfo(dtype).min else None


class RequantizeNonFuseableActivationPass(ProgramPass):
    # Reads final output qparams.
    modifies = frozenset({Aspect.QPARAMS})
    requires = frozenset({Aspect.PROGRAM_IO, Aspect.CONSTANTS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.rewritten = 0
        for act in list(graph.nodes):
            if act.op != "call_function" or act.target not in _ACTIVATIONS:
                continue
            src = act.args[0]
            if (
                not isinstance(src, Node)
                or src.target in (DEQUANTIZE_PER_TENSOR,)
                or src.op != "call_function"
            ):
                continue
            q = _activation_quantize(act)
            if q is None:
                continue
            _, dq_new = insert_qdq(graph, src, tuple(q.args[1:6]), meta_from=q)
            act.replace_input_with(src, dq_new)
            self.rewritten += 1
        if self.rewritten:
            graph.lint()
            program.graph_module.recompile()
        return program
