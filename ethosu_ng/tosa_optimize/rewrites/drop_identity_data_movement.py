# SPDX-License-Identifier: BSD-3-Clause
"""A TRANSPOSE with the identity permutation, or a RESHAPE to its input's shape, is removed;
its readers read its input. Kept when its output is a graph output (the graph's IO names are
part of the contract)."""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import is_identity, perm_of
from ethosu_ng.tosa_optimize.rewrites.compose_transposes import ComposeTransposes
from ethosu_ng.tosa_optimize.rewrites.merge_reshapes import MergeReshapes


def is_identity_op(graph: Graph, op) -> bool:
    if op.op == "TRANSPOSE":
        return is_identity(perm_of(op))
    if op.op == "RESHAPE":
        return graph.shape_of(op.inputs[0]) == graph.shape_of(op.outputs[0])
    return False


class DropIdentityDataMovement(TosaRewrite):
    runs_after = (ComposeTransposes, MergeReshapes)  # they leave identities behind

    def apply(self, graph: Graph) -> int:
        changed = 0
        for op in list(graph.ops):
            out = op.outputs[0] if op.outputs else None
            if out is None or out in graph.outputs or not is_identity_op(graph, op):
                continue
            graph.replace_uses(out, op.inputs[0])
            graph.ops.remove(op)
            changed += 1
        return changed
