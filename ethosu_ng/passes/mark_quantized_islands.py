# SPDX-License-Identifier: BSD-3-Clause
"""Mark ops that are quantized by construction so upstream's support check accepts them.

Helps keep seed 002's guarantee. Upstream's operator support requires the quantizer's
annotation marker on each compute node. Shared-qspec clusters at uint8 IO can end up as
``DQ -> op -> Q`` without that marker (the annotation was skipped for the uint8 IO side, then
SignedInteriorPass made the edge int8). An op whose every tensor input is a dequantize (or an
integer constant) and whose every user is a quantize computes on exactly the values the
quantized model defines, so it is quantized; we add the marker upstream looks for.
"""

from __future__ import annotations

from torch.export import ExportedProgram

from ethosu_ng.adapters import arm as upstream
from ethosu_ng.ops import is_dequantize, is_per_tensor_quantize
from ethosu_ng.passes.base import Aspect, ProgramPass


class MarkQuantizedIslandsPass(ProgramPass):
    # The DQ -> op -> Q islands the qparam passes create are marked; the commute moves quantizes
    # in front of data-movement ops, which makes new islands (a state buffer's cat read through a
    # reshape) and removes none.
    modifies = frozenset({Aspect.QUANTIZED_MARKS})
    requires = frozenset({Aspect.QDQ_PLACEMENT, Aspect.QPARAMS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        self.marked = 0
        for n in program.graph_module.graph.nodes:
            if n.op != "call_function" or is_dequantize(n) or is_per_tensor_quantize(n):
                continue
            if upstream.is_marked_quantized(n):
                continue
            ins = n.all_input_nodes
            if not ins or not n.users:
                continue
            if all(is_dequantize(i) for i in ins) and all(
                is_per_tensor_quantize(u) for u in n.users
            ):
                upstream.mark_quantized(n)
                self.marked += 1
        return program
