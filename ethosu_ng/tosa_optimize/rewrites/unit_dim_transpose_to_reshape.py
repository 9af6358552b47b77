# SPDX-License-Identifier: BSD-3-Clause
"""A TRANSPOSE that only moves size-1 dimensions -> a RESHAPE to its output shape.

When the dimensions larger than 1 keep their relative order, the row-major element order is
unchanged, so the transpose is a reshape (which Vela does without moving data).
"""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import perm_of


def moves_only_unit_dims(shape, perm) -> bool:
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


class UnitDimTransposeToReshape(TosaRewrite):
    def apply(self, graph: Graph) -> int:
        changed = 0
        for op in list(graph.ops):
            if op.op != "TRANSPOSE":
                continue
            perm = perm_of(op)
            if list(perm) == list(range(len(perm))):
                continue  # an identity transpose: DropIdentityDataMovement removes it
            if not moves_only_unit_dims(graph.shape_of(op.inputs[0]), perm):
                continue
            out_shape = graph.shape_of(op.outputs[0])
            shape = graph.add_const_shape(op, op.outputs[0] + "_shape", out_shape)
            op.op, op.attr, op.inputs = "RESHAPE", {}, [op.inputs[0], shape]
            changed += 1
        return changed
