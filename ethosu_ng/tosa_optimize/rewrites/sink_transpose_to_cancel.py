# SPDX-License-Identifier: BSD-3-Clause
"""Move a TRANSPOSE down through element-wise operators and reshapes until it meets another
TRANSPOSE or can go no further.

    t = transpose(x, p); e1 = E1(t, c1); r = reshape(e1, s); ...; ek = Ek(...); ...
 -> e1' = E1(x, c1'); r' = reshape(e1', s'); ...; ek' = Ek(...); ek = transpose(ek', p')

Element-wise operators (``_layout.ELEMENTWISE_DATA_INPUTS``; RESCALE only when not per-channel)
compute every element from the elements at the same index, so they commute with any transpose.
A second data operand ``c`` of such an operator is brought into ``x``'s layout as
``transpose(c, inverse(p))`` without a new transpose: a constant is stored transposed (broadcast
dimensions move with it), an all-ones shape needs nothing, and ``transpose(z, p)``, also behind
single-reader element-wise operators (``U(transpose(z, p))``), becomes ``z`` (``U(z)``). Any
other operand stops the chain.

A RESHAPE commutes when the dimensions it merges or splits are consecutive in ``x`` too
(``_layout.reshape_before_transpose``): it becomes a reshape of the untransposed tensor and the
pending permutation changes to ``p'`` (the NHWC -> NCHW transpose, a split of H*W into H, W and
the NCHW -> NHWC transpose that upstream emits around ``transpose(1, 2).reshape(b, c, h, w)``).

The chain follows single readers. It ends at a TRANSPOSE (composed with ``p'``; gone when that
is the identity), or where it can go no further: there the pending transpose would have to be put
back, which is done only when every reader of that tensor transposes it back (they cancel with
it: ``ComposeTransposes``, ``DropIdentityDataMovement``). Applied only when it removes a transpose
and adds none: Vela 5.1 already folds a transpose into the write of the operator before it where
it can (0 cycles in its per-layer table), so a transpose moved to a graph output or next to a
different operator can cost more than the two it replaced (measured: docs/benchmarks.md).
Changed tensors keep their names (so their operators keep their FX sources); the last operator
takes over a cancelled closing transpose's output name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import (
    compose,
    elementwise_inputs,
    inverse,
    is_identity,
    perm_of,
    permuted,
    readers,
    reshape_before_transpose,
    single_consumer,
)
from ethosu_ng.tosa_optimize.rewrites.compose_transposes import ComposeTransposes

MAX_CHAIN = 32
MAX_OPERAND_DEPTH = 8


@dataclass
class _Operand:
    """How a second operand reaches the untransposed layout."""

    name: Optional[str] = None  # read this tensor instead
    const: Optional[Tuple[np.ndarray, str]] = None  # store this transposed constant
    relayout: List[Operator] = field(default_factory=list)  # unary ops to move, top first
    root: Optional[Operator] = None  # the transpose they read
    removes: int = 0  # transposes that become dead


@dataclass
class _Step:
    op: Operator
    perm: Tuple[int, ...]  # the pending transpose's permutation where this operator reads
    operands: Dict[int, _Operand] = field(default_factory=dict)
    shape: Optional[list] = None  # RESHAPE: the new target shape


@dataclass
class _Plan:
    steps: List[_Step]
    perm: Tuple[int, ...]  # pending after the last step
    bottom: Optional[Operator]  # the closing transpose, if the chain ends in one
    score: int  # transposes removed minus added


class SinkTransposeToCancel(TosaRewrite):
    runs_after = (ComposeTransposes,)  # adjacent pairs are composed first; this finds the rest

    def apply(self, graph: Graph) -> int:
        changed = 0
        # The maps are rebuilt after a change only: per candidate they made this quadratic.
        alive = {id(o) for o in graph.ops}
        consumers, producers = graph.consumers(), graph.producers()
        for top in list(graph.ops):
            if (
                top.op == "TRANSPOSE"
                and id(top) in alive
                and self._sink_from(graph, top, consumers, producers)
            ):
                changed += 1
                alive = {id(o) for o in graph.ops}
                consumers, producers = graph.consumers(), graph.producers()
        return changed

    def _sink_from(self, graph: Graph, top: Operator, consumers, producers) -> int:
        if top.outputs[0] in graph.outputs:
            return 0
        readers = consumers.get(top.outputs[0], [])
        for first in readers:
            plan = _plan(graph, consumers, producers, top, first, len(readers) == 1)
            if plan is not None and plan.score > 0:
                _rewrite(graph, top, plan)
                return 1
        return 0


def _plan(graph, consumers, producers, top, first, top_dies: bool) -> Optional[_Plan]:
    perm = perm_of(top)
    prev = top.outputs[0]
    steps: List[_Step] = []
    op: Optional[Operator] = first
    score = 1 if top_dies else 0
    while op is not None and len(steps) < MAX_CHAIN:
        if op.op == "TRANSPOSE" and steps:
            closes = is_identity(compose(perm, perm_of(op)))
            return _Plan(steps, perm, op, score + (1 if closes else 0))
        step = _step(graph, producers, op, prev, perm)
        if step is None:
            break
        steps.append(step)
        score += sum(o.removes for o in step.operands.values())
        if step.shape is not None:
            perm = _after_reshape(graph, op, prev, perm)
        prev = op.outputs[0]
        op = single_consumer(graph, consumers, prev)
    if not steps:
        return None
    # An open end: the transpose is put back on the last tensor; readers that undo it cancel.
    readers = consumers.get(prev, [])
    undo = [
        r
        for r in readers
        if r.op == "TRANSPOSE"
        and r.outputs[0] not in graph.outputs
        and is_identity(compose(perm, perm_of(r)))
    ]
    if not readers or len(undo) != len(readers) or prev in graph.outputs:
        return None  # the transpose would stay, somewhere Vela may not fold it
    return _Plan(steps, perm, None, score + len(undo))


def _after_reshape(graph, op, prev, perm) -> Tuple[int, ...]:
    src = permuted(graph.shape_of(prev), inverse(perm))
    return reshape_before_transpose(src, perm, graph.shape_of(op.outputs[0]))[1]


def _step(graph, producers, op, prev, perm) -> Optional[_Step]:
    if len(op.outputs) != 1:
        return None
    step = _Step(op, perm)
    if op.op == "RESHAPE":
        src = permuted(graph.shape_of(prev), inverse(perm))
        moved = reshape_before_transpose(src, perm, graph.shape_of(op.outputs[0]))
        if op.inputs[0] != prev or moved is None:
            return None
        step.shape = moved[0]
        return step
    data = elementwise_inputs(op)
    if data is None:
        return None
    for j in data:
        t = op.inputs[j]
        if t == prev:
            continue
        how = _operand(graph, producers, t, perm, op, MAX_OPERAND_DEPTH)
        if how is None:
            return None
        step.operands[j] = how
    return step


def _operand(graph, producers, name, perm, reader, depth) -> Optional[_Operand]:
    """``transpose(name, inverse(perm))`` without a new transpose, or None."""
    shape = graph.tensors[name].shape if name in graph.tensors else None
    if shape is None or len(shape) != len(perm):
        return None
    if all(d == 1 for d in shape):
        return _Operand(name=name)
    src = producers.get(name)
    if src is None:
        return None
    sole = reader.inputs.count(name) == 1 and readers(graph, name) == 1
    if src.op == "TRANSPOSE" and tuple(perm_of(src)) == tuple(perm):
        return _Operand(name=src.inputs[0], removes=1 if sole else 0)
    if src.op == "CONST":
        arr = graph.const_array(name)
        return None if arr is None else _Operand(const=(arr, graph.tensors[name].dtype))
    # U(transpose(z, perm)) with U unary element-wise and read only here: move U too.
    if depth and sole and name not in graph.outputs and elementwise_inputs(src) == (0,):
        inner = _operand(graph, producers, src.inputs[0], perm, src, depth - 1)
        if inner is not None and inner.root is not None:
            return _Operand(relayout=[*inner.relayout, src], root=inner.root, removes=inner.removes)
        if inner is not None and inner.name is not None and inner.removes:
            root = producers[src.inputs[0]]
            return _Operand(relayout=[src], root=root, removes=inner.removes)
    return None


def _rewrite(graph: Graph, top: Operator, plan: _Plan) -> None:
    prev_old, prev_new = top.outputs[0], top.inputs[0]
    for step in plan.steps:
        op, inv = step.op, inverse(step.perm)
        inputs = [prev_new if t == prev_old else t for t in op.inputs]
        for j, how in step.operands.items():
            if how.name is not None:
                inputs[j] = how.name
            elif how.const is not None:
                arr, dtype = how.const
                inputs[j] = graph.add_const(op, op.inputs[j], np.transpose(arr, inv), dtype)
            else:  # unary operators between a same-perm transpose and here
                reading = how.root.outputs[0]
                for u in how.relayout:
                    u.inputs = [how.root.inputs[0] if t == reading else t for t in u.inputs]
                    reading = how.root.outputs[0]  # only the first reads the transpose
                    t = graph.tensors[u.outputs[0]]
                    t.shape = permuted(t.shape, inv)
        out = graph.tensors[op.outputs[0]]
        if step.shape is not None:
            inputs[1] = graph.add_const_shape(op, out.name + "_shape", step.shape)
            out.shape = list(step.shape)
        else:
            out.shape = permuted(out.shape, inv)
        op.inputs = inputs
        prev_old = prev_new = out.name
    last = plan.steps[-1].op
    if plan.bottom is not None:
        q = compose(plan.perm, perm_of(plan.bottom))
        if is_identity(q):
            graph.tensors[plan.bottom.outputs[0]].shape = list(graph.tensors[prev_new].shape)
            last.outputs = [plan.bottom.outputs[0]]
            graph.ops.remove(plan.bottom)
        else:
            plan.bottom.attr = {**plan.bottom.attr, "perms": list(q)}
        return
    # Open end: the last tensor keeps its name and layout, now made by a transpose put back.
    old = graph.tensors[prev_new]
    fresh = graph.fresh_name(old.name)
    graph.tensors[fresh] = type(old)(fresh, list(old.shape), old.dtype)
    old.shape = permuted(old.shape, plan.perm)
    last.outputs = [fresh]
    back = type(top)("TRANSPOSE", [fresh], [old.name], {"perms": list(plan.perm)}, None, top.source)
    graph.ops.insert(graph.ops.index(last) + 1, back)
