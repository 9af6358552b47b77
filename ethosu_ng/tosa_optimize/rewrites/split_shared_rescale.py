# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""A RESCALE several operators read -> one copy per reader that folds it as an operand scale.

Vela folds a RESCALE into its reader only when its output has one reader. Upstream's square
``MUL(RESCALE(x), RESCALE(x))`` is one RESCALE read twice by the same MUL (StarReLU's
``relu(x) ** 2``, a norm's ``(x - mean) ** 2``): the RESCALE stays a layer of its own, the MUL
then reads int32 and cannot take its output RESCALE either (two standalone layers; measured on
ethos-u85-256 ``[1, 16, 16, 16]``: 17,024 NPU cycles, with one copy per operand 1,024: the MUL
alone). A copy is given only to a reader that folds it (``_rescale.absorbs_operand``) and, for a
binary reader, whose other operand folds too; other readers keep the original. Exact: a copy
computes what the original does.
"""

from __future__ import annotations

from typing import List, Tuple

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._rescale import absorbs_operand, read_rescale


def _other_operand_folds(graph: Graph, producers, consumer: Operator, slot: int, y: str) -> bool:
    """The binary ``consumer``'s operand other than ``slot`` is ``y`` or a RESCALE it folds."""
    other = consumer.inputs[1 - slot]
    if other == y:
        return True
    p = producers.get(other)
    return p is not None and absorbs_operand(consumer, read_rescale(graph, p))


class SplitSharedRescale(TosaRewrite):
    def apply(self, graph: Graph) -> int:
        changed = 0
        producers = graph.producers()
        consumers = graph.consumers()
        for op in list(graph.ops):
            r = read_rescale(graph, op)
            if r is None:
                continue
            y = op.outputs[0]
            readers = list({id(c): c for c in consumers.get(y, [])}.values())  # each once
            slots: List[Tuple[Operator, int]] = [
                (c, k) for c in readers for k, t in enumerate(c.inputs) if t == y
            ]
            if len(slots) + (y in graph.outputs) < 2:
                continue
            folding = [
                (c, k)
                for c, k in slots
                if k < 2
                and absorbs_operand(c, r)
                and _other_operand_folds(graph, producers, c, k, y)
            ]
            if not folding:
                continue
            if len(folding) == len(slots) and y not in graph.outputs:
                folding = folding[1:]  # the original keeps one reader
            for c, k in folding:
                copy = graph.insert_copy(op, c)
                c.inputs[k] = copy.outputs[0]
                # The maps edited in place (a rebuild per change is quadratic in the graph) to
                # what a rebuild would give, but for the order of the copy's inputs' readers,
                # which the loop does not ask again: a later binary reader may find its other
                # operand is this copy.
                producers[copy.outputs[0]] = copy
                consumers[copy.outputs[0]] = [c]
                for t in copy.inputs:
                    consumers.setdefault(t, []).append(copy)
                readers = consumers[y]
                del readers[next(i for i, o in enumerate(readers) if o is c)]
            changed += 1
        return changed
