"""Move a TRANSPOSE down through element-wise operators until it meets another TRANSPOSE.

    t = transpose(x, p); e1 = E1(t, c1); ...; ek = Ek(...); y = transpose(ek, q)
 -> e1' = E1(x, c1'); ...; ek' = Ek(...); y = transpose(ek', p then q)   (or ek' *is* y when
                                                                         p then q is the identity)

Element-wise operators (``_layout.ELEMENTWISE_DATA_INPUTS``; RESCALE only when not per-channel)
compute every element from the elements at the same index, so they commute with any transpose.
A second data operand ``c`` of such an operator is brought into ``x``'s layout as
``transpose(c, inverse(p))``: a constant is stored transposed (broadcast dimensions move with
it), a ``transpose(z, p)`` is replaced by ``z``, an all-ones shape needs nothing. Any other
operand stops the rewrite (it would need a new transpose).

Applied only when it removes a transpose: the chain ends in a transpose that cancels ``p``, or
the first transpose has no other reader (then it disappears, and at most the composed one is
left, on the chain's last tensor). Intermediate tensors must have exactly one reader and not be
graph outputs, since their layout changes. A chain's tensors keep their names (so their
operators keep their FX sources); the last operator takes over the cancelled transpose's
output name.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites._layout import (
    compose,
    elementwise_inputs,
    inverse,
    is_identity,
    perm_of,
    permuted,
    single_consumer,
)
from ethosu_ng.tosa_optimize.rewrites.compose_transposes import ComposeTransposes

MAX_CHAIN = 32


class SinkTransposeToCancel:
    runs_after = (ComposeTransposes,)  # adjacent pairs are composed first; this finds the rest

    def apply(self, graph: Graph) -> int:
        changed = 0
        for top in list(graph.ops):
            if top.op == "TRANSPOSE" and any(o is top for o in graph.ops):
                changed += self._sink_from(graph, top)
        return changed

    def _sink_from(self, graph: Graph, top: Operator) -> int:
        consumers = graph.consumers()
        producers = graph.producers()
        a0 = top.outputs[0]
        readers = consumers.get(a0, [])
        if a0 in graph.outputs:
            return 0
        for first in readers:
            plan = self._plan(graph, consumers, producers, top, first)
            if plan is None:
                continue
            chain, bottom, operands = plan
            last_reader = len(readers) == 1
            if not (is_identity(compose(perm_of(top), perm_of(bottom))) or last_reader):
                continue
            self._rewrite(graph, top, chain, bottom, operands)
            return 1
        return 0

    def _plan(
        self, graph, consumers, producers, top: Operator, first: Operator
    ) -> Optional[Tuple[List[Operator], Operator, Dict[Tuple[int, int], object]]]:
        """The chain from ``first`` to the closing transpose, and how each other data operand is
        brought into the untransposed layout; None if there is no such chain."""
        p = perm_of(top)
        prev = top.outputs[0]
        chain: List[Operator] = []
        operands: Dict[Tuple[int, int], object] = {}
        op = first
        while len(chain) < MAX_CHAIN:
            if op.op == "TRANSPOSE":
                return (chain, op, operands) if chain else None
            data = elementwise_inputs(op)
            if data is None or len(op.outputs) != 1:
                return None
            for j in data:
                t = op.inputs[j]
                if t == prev:
                    continue
                how = _operand_in_source_layout(graph, producers, t, p)
                if how is None:
                    return None
                operands[(len(chain), j)] = how
            chain.append(op)
            prev = op.outputs[0]
            nxt = single_consumer(graph, consumers, prev)
            if nxt is None:
                return None
            op = nxt
        return None

    def _rewrite(self, graph: Graph, top, chain, bottom, operands) -> None:
        p = perm_of(top)
        inv = inverse(p)
        prev_old, prev_new = top.outputs[0], top.inputs[0]
        for k, op in enumerate(chain):
            new_inputs = list(op.inputs)
            for j, t in enumerate(op.inputs):
                if t == prev_old:
                    new_inputs[j] = prev_new
                elif (k, j) in operands:
                    how = operands[(k, j)]
                    if isinstance(how, str):
                        new_inputs[j] = how
                    else:  # a constant to store transposed
                        arr, dtype = how
                        new_inputs[j] = graph.add_const(op, t, np.transpose(arr, inv), dtype)
            op.inputs = new_inputs
            out = op.outputs[0]
            tensor = graph.tensors[out]
            tensor.shape = permuted(tensor.shape, inv)
            prev_old, prev_new = out, out
        last = chain[-1]
        q = compose(p, perm_of(bottom))
        if is_identity(q):
            graph.tensors[bottom.outputs[0]].shape = list(graph.tensors[last.outputs[0]].shape)
            last.outputs = [bottom.outputs[0]]
            graph.ops.remove(bottom)
        else:
            bottom.attr = {**bottom.attr, "perms": list(q)}


def _operand_in_source_layout(graph: Graph, producers, name: str, perm) -> Optional[object]:
    """How to get ``transpose(name, inverse(perm))`` without a new transpose: a tensor name, a
    (constant array, dtype) to store, or None."""
    shape = graph.tensors[name].shape if name in graph.tensors else None
    if shape is None or len(shape) != len(perm):
        return None
    if all(d == 1 for d in shape):
        return name
    src = producers.get(name)
    if src is not None and src.op == "TRANSPOSE" and tuple(perm_of(src)) == tuple(perm):
        return src.inputs[0]
    if src is not None and src.op == "CONST":
        arr = graph.const_array(name)
        if arr is not None:
            return (arr, graph.tensors[name].dtype)
    return None
