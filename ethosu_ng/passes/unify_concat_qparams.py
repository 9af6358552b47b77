# SPDX-License-Identifier: BSD-3-Clause
"""Requantize each input of a quantized concatenation to the concatenation's output qparams.

Keeps seed 003's guarantee for non-constant tensors. Upstream's FoldAndAnnotateQParamsPass keeps
one input-qparams entry per argument index, merged across a list argument's elements, so a
``cat`` whose inputs carry different qparams is lowered without a per-input RESCALE (measured:
119 LSB off for cat(conv(x), y) at uint8 IO). Quantization is elementwise, so

    cat(DQ_a(a), DQ_b(b)) -> Q_o    equals    cat(Q_o(DQ_a(a)), Q_o(DQ_b(b)))

exactly. We insert ``Q_o -> DQ_o`` on every input whose qparams differ from the output's; each
becomes one RESCALE, and every list element then really has the qparams the single entry says.
Input and output qparams are found through data-movement ops too: in ``cat((y, x.reshape(1,
-1))).view(-1, 1)`` the reshape of a dequantized input carries that input's qparams and the
quantize after the view is the cat's (the Q/DQ commute later moves both onto the cat).
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import ATEN_DATA_MOVEMENT_SINGLE_OUTPUT, DEQUANTIZE_PER_TENSOR
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.qdq_nodes import insert_qdq, qparams, quantize_qparams_downstream

aten = torch.ops.aten
_CONCAT = (aten.cat.default, aten.concat.default, aten.stack.default)


def _item_qparams(item: Node):
    """QParams of the dequantize ``item`` is, or is a data-movement view of; else None."""
    while item.op == "call_function" and item.target in ATEN_DATA_MOVEMENT_SINGLE_OUTPUT:
        if not isinstance(item.args[0], Node):
            return None
        item = item.args[0]
    return qparams(item) if item.target == DEQUANTIZE_PER_TENSOR else None


class UnifyConcatQParamsPass(ProgramPass):
    # Roll's cats exist, constant cats are folded exactly rather than requantized.
    modifies = frozenset({Aspect.QPARAMS})
    requires = frozenset({Aspect.SLICES_AND_CATS, Aspect.INTERIOR_DTYPE, Aspect.CONSTANTS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.rewritten = 0
        for cat in list(graph.nodes):
            if cat.op != "call_function" or cat.target not in _CONCAT:
                continue
            items = cat.args[0]
            if not isinstance(items, (list, tuple)) or not all(isinstance(i, Node) for i in items):
                continue
            out_qps = quantize_qparams_downstream(cat)
            if len(out_qps) != 1 or None in out_qps:
                continue
            qp = out_qps.pop()
            new_items = []
            for item in items:
                item_qp = _item_qparams(item)
                if item_qp is None or item_qp == qp:
                    new_items.append(item)
                    continue
                _, dq = insert_qdq(graph, item, qp, meta_from=item, before=cat)
                new_items.append(dq)
                self.rewritten += 1
            cat.update_arg(0, type(items)(new_items))
        if self.rewritten:
            graph.lint()
            program.graph_module.recompile()
        return program
