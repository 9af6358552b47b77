# SPDX-License-Identifier: BSD-3-Clause
"""transpose(transpose(x, p1), p2) -> transpose(x, p1 then p2).

The second transpose reads ``x`` directly and the first is removed. Where the first has other
readers it stays for them, so this is done only when the composition is the identity (then
``DropIdentityDataMovement`` removes the second): never a transpose more.
"""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import compose, is_identity, perm_of, readers


class ComposeTransposes(TosaRewrite):
    def apply(self, graph: Graph) -> int:
        producers = graph.producers()
        changed = 0
        for op in graph.ops:
            if op.op != "TRANSPOSE":
                continue
            first = producers.get(op.inputs[0])
            if first is None or first.op != "TRANSPOSE":
                continue
            perm = compose(perm_of(first), perm_of(op))
            if readers(graph, first.outputs[0]) != 1 and not is_identity(perm):
                continue
            op.attr = {**op.attr, "perms": list(perm)}
            op.inputs = [first.inputs[0]]
            changed += 1
        return changed
