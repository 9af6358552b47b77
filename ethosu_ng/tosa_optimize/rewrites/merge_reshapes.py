# SPDX-License-Identifier: BSD-3-Clause
"""reshape(reshape(x, s1), s2) -> reshape(x, s2).

Row-major reshapes compose to the last one. Applied only where the inner reshape has no other
reader (it is removed): Vela copies a tensor that several reshapes read (a MemoryCopy layer
each), so merging into a shared one costs cycles (measured on the attention scenario).
"""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import readers
from ethosu_ng.tosa_optimize.rewrites.unit_dim_transpose_to_reshape import (
    UnitDimTransposeToReshape,
)


class MergeReshapes(TosaRewrite):
    runs_after = (UnitDimTransposeToReshape,)  # the reshapes it makes merge in the same round

    def apply(self, graph: Graph) -> int:
        producers = graph.producers()
        changed = 0
        for op in graph.ops:
            if op.op != "RESHAPE":
                continue
            first = producers.get(op.inputs[0])
            if first is None or first.op != "RESHAPE" or readers(graph, first.outputs[0]) != 1:
                continue
            op.inputs = [first.inputs[0], *op.inputs[1:]]
            changed += 1
        return changed
