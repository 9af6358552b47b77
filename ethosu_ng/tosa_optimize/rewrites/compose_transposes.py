"""transpose(transpose(x, p1), p2) -> transpose(x, p1 then p2).

The second transpose reads ``x`` directly; the first is removed when nothing else reads it.
When the composition is the identity, ``DropIdentityDataMovement`` removes what is left.
Never adds an operator: a first transpose with other readers stays for them.
"""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph
from ethosu_ng.tosa_optimize.rewrites._layout import compose, perm_of


class ComposeTransposes:
    runs_after = ()

    def apply(self, graph: Graph) -> int:
        producers = graph.producers()
        changed = 0
        for op in graph.ops:
            if op.op != "TRANSPOSE":
                continue
            first = producers.get(op.inputs[0])
            if first is None or first.op != "TRANSPOSE":
                continue
            op.attr = {**op.attr, "perms": list(compose(perm_of(first), perm_of(op)))}
            op.inputs = [first.inputs[0]]
            changed += 1
        return changed
