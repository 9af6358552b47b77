"""reshape(reshape(x, s1), s2) -> reshape(x, s2).

Row-major reshapes compose to the last one. The outer reshape reads ``x`` directly; the inner
one is removed when nothing else reads it. Never adds an operator.
"""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph
from ethosu_ng.tosa_optimize.rewrites.unit_dim_transpose_to_reshape import (
    UnitDimTransposeToReshape,
)


class MergeReshapes:
    runs_after = (UnitDimTransposeToReshape,)  # the reshapes it makes merge in the same round

    def apply(self, graph: Graph) -> int:
        producers = graph.producers()
        changed = 0
        for op in graph.ops:
            if op.op != "RESHAPE":
                continue
            first = producers.get(op.inputs[0])
            if first is None or first.op != "RESHAPE":
                continue
            op.inputs = [first.inputs[0], *op.inputs[1:]]
            changed += 1
        return changed
