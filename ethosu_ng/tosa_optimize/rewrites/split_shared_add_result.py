# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""An ADD/SUB whose int32 result several operators read -> one copy of the ADD/SUB per result
RESCALE that would fold into it as its output scale.

Vela folds a result RESCALE into the ADD/SUB that writes its input only when that int32 tensor
has one reader. Residual chains (ConvNeXt) lowered with upstream's ``FuseConsecutiveRescalesPass``
read a residual ADD's int32 result twice: its RESCALE to int8 (into the next block's transpose
and depthwise convolution) and the next residual ADD, which takes the sum unrequantized (our
lowering does not run that pass, ``adapters/arm.py``; a graph given to the stage may still have
the form). The RESCALE then runs as a layer of its own, a
pass reading the whole int32 tensor. A copy of the ADD/SUB reading the same operands, whose only
reader is the RESCALE, lets Vela fold both the RESCALE and (after ``SplitSharedRescale`` gives
the copy its own operand RESCALEs) the operand scales into one elementwise pass over 8-bit data
(measured: tests/test_rescale_rewrites.py). Exact: the copy computes what the original does.

Only when both operands are RESCALEs Vela folds into an ADD/SUB (per tensor, 8/16-bit in): else
the copy's operands would be standalone layers too and the copy would cost more than it saves.
"""

from __future__ import annotations

from typing import List, Optional

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    NARROW,
    Rescale,
    absorbs_operand,
    read_rescale,
    reduce_scale,
)


def operands_fold(graph: Graph, producers, op: Operator) -> bool:
    """Both operands of the ADD/SUB ``op`` are RESCALEs Vela (Ethos-U85) folds into it."""
    if op.inputs[0] == op.inputs[1]:
        return False
    for t in op.inputs[:2]:
        p = producers.get(t)
        r = read_rescale(graph, p) if p is not None else None
        if not absorbs_operand(op, r):
            return False
    return True


def folding_result_rescale(graph: Graph, reader: Operator, y: str) -> Optional[Rescale]:
    """``reader`` is a per-tensor RESCALE of ``y`` (int32, zero point 0) to 8/16 bits whose
    scale is a pure shift: what Vela takes as an ADD/SUB's output scale with 32-bit operands."""
    r = read_rescale(graph, reader)
    if r is None or reader.inputs[0] != y or reader.inputs.count(y) != 1:
        return None
    if r.in_dtype != "INT32" or r.out_dtype not in NARROW or r.per_channel or r.unsigned:
        return None
    if r.input_zp != 0 or any(reduce_scale(m, s)[0] != 1 for m, s in zip(r.multiplier, r.shift)):
        return None
    return r


class SplitSharedAddResult(TosaRewrite):
    # On Ethos-U55 the copy (8-bit operands and result, scaled) costs more than the RESCALE it
    # folds: ``[1, 56, 56, 40]`` 188,160 against 156,800 cycles; on U85 31,360 against 289,754.
    families = ("ethos-u85",)

    def apply(self, graph: Graph) -> int:
        changed = 0
        producers, consumers = graph.producers(), graph.consumers()
        for op in list(graph.ops):
            if op.op not in ("ADD", "SUB") or graph.tensors[op.outputs[0]].dtype != "INT32":
                continue
            y = op.outputs[0]
            readers = consumers.get(y, [])
            slots = sum(c.inputs.count(y) for c in readers) + (y in graph.outputs)
            if slots < 2 or not operands_fold(graph, producers, op):
                continue
            folding: List[Operator] = [
                c for c in readers if folding_result_rescale(graph, c, y) is not None
            ]
            if not folding:
                continue
            if len(folding) == slots:
                folding = folding[1:]  # the original keeps one reader
            for c in folding:
                c.inputs[0] = graph.copy_before(op, c)
            changed += 1
            producers, consumers = graph.producers(), graph.consumers()
        return changed
