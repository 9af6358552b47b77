# SPDX-License-Identifier: BSD-3-Clause
"""Permutation arithmetic and the element-wise operator table the rewrites share."""

from __future__ import annotations

import functools
import math
from collections import deque
from typing import Dict, List, Optional, Sequence, Tuple

from ethosu_ng.tosa_optimize.graph import Graph, Operator


def compose(first: Sequence[int], second: Sequence[int]) -> Tuple[int, ...]:
    """The perm of ``transpose(transpose(x, first), second)`` as one transpose of ``x``."""
    return tuple(first[j] for j in second)


def inverse(perm: Sequence[int]) -> Tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def is_identity(perm: Sequence[int]) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


def permuted(shape: Sequence[int], perm: Sequence[int]) -> list:
    return [shape[p] for p in perm]


def perm_of(op: Operator) -> Tuple[int, ...]:
    return tuple(int(p) for p in op.attr["perms"])


# Operators that compute each output element from the input elements at the same index only
# (broadcasting size-1 dimensions), with the input positions that carry such data. Every other
# input is a parameter (zero points, shifts, a lookup table) whose meaning does not depend on
# the layout. RESCALE is here only when not per-channel (``elementwise_inputs``).
ELEMENTWISE_DATA_INPUTS: Dict[str, Tuple[int, ...]] = {
    **{
        op: (0,)
        for op in (
            "RESCALE",
            "TABLE",
            "CLAMP",
            "CAST",
            "NEGATE",
            "ABS",
            "BITWISE_NOT",
            "LOGICAL_NOT",
            "CLZ",
            "SIGMOID",
            "TANH",
            "ERF",
            "EXP",
            "LOG",
            "RECIPROCAL",
            "RSQRT",
            "CEIL",
            "FLOOR",
            "SIN",
            "COS",
        )
    },
    **{
        op: (0, 1)
        for op in (
            "ADD",
            "SUB",
            "MUL",
            "MAXIMUM",
            "MINIMUM",
            "POW",
            "INTDIV",
            "ARITHMETIC_RIGHT_SHIFT",
            "LOGICAL_LEFT_SHIFT",
            "LOGICAL_RIGHT_SHIFT",
            "BITWISE_AND",
            "BITWISE_OR",
            "BITWISE_XOR",
            "LOGICAL_AND",
            "LOGICAL_OR",
            "LOGICAL_XOR",
            "EQUAL",
            "GREATER",
            "GREATER_EQUAL",
        )
    },
    "SELECT": (0, 1, 2),
}


def elementwise_inputs(op: Operator) -> Optional[Tuple[int, ...]]:
    """Data input positions of an element-wise operator; None if ``op`` is not one.

    A per-channel RESCALE scales along the last dimension, so it is layout-dependent."""
    if op.op == "RESCALE" and op.attr.get("per_channel"):
        return None
    return ELEMENTWISE_DATA_INPUTS.get(op.op)


def readers(graph: Graph, name: str) -> int:
    """How many operator inputs read ``name``, plus one if it is a graph output."""
    return (name in graph.outputs) + sum(o.inputs.count(name) for o in graph.ops)


def single_consumer(graph: Graph, consumers, name: str) -> Optional[Operator]:
    """The only operator reading ``name`` (once), if it is not also a graph output."""
    users = consumers.get(name, [])
    if len(users) != 1 or name in graph.outputs or users[0].inputs.count(name) != 1:
        return None
    return users[0]


def reshape_groups(src: Sequence[int], dst: Sequence[int]):
    """Pair consecutive dimensions of ``src`` and ``dst`` into groups of equal element count
    ([(src dims, dst dims)]), as a row-major reshape merges and splits them. Size-1 dimensions
    left over at the end join the last group; None when the counts cannot be paired."""
    groups = []
    i = j = 0
    while i < len(src) or j < len(dst):
        if groups and (i == len(src) or j == len(dst)):
            # Only size-1 dimensions remain on one side: they join the last group.
            rest_a, rest_b = list(range(i, len(src))), list(range(j, len(dst)))
            if any(src[k] != 1 for k in rest_a) or any(dst[k] != 1 for k in rest_b):
                return None
            groups[-1][0].extend(rest_a)
            groups[-1][1].extend(rest_b)
            break
        if i == len(src) or j == len(dst):
            return None
        a, b, pa, pb = [i], [j], src[i], dst[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(src):
                a.append(i)
                pa *= src[i]
                i += 1
            elif pb < pa and j < len(dst):
                b.append(j)
                pb *= dst[j]
                j += 1
            else:
                return None
        groups.append((a, b))
    return groups


def reshape_before_transpose(x_shape, perm, dst) -> Optional[Tuple[list, Tuple[int, ...]]]:
    """``reshape(transpose(x, perm), dst)`` as ``transpose(reshape(x, shape), perm2)``:
    (shape, perm2), or None when the reshape mixes dimensions the transpose separates.

    Each group of dimensions the reshape merges or splits must come from consecutive dimensions
    of ``x`` in their order; then reshaping those runs of ``x`` and permuting the runs is the same
    row-major element order."""
    t_shape = permuted(x_shape, perm)
    groups = reshape_groups(t_shape, dst)
    if groups is None:
        return None
    runs = []
    for a, b in groups:
        xs = [perm[k] for k in a]
        if xs != list(range(xs[0], xs[0] + len(xs))):
            return None
        runs.append((xs[0], b))
    shape: list = []
    position = {}
    for _, b in sorted(runs, key=lambda r: r[0]):  # the runs in x's order
        for j in b:
            position[j] = len(shape)
            shape.append(dst[j])
    perm2 = tuple(position[j] for _, b in runs for j in b)  # back in the transpose's order
    return shape, perm2


# Above this rank the breadth-first search (``(rank - 1)!`` states) is not worth it.
MAX_RANK = 7

Swap = Tuple[int, int]  # (i, j): the first i dims of the order swap with dims i .. j-1


def swap_plan(perm: Sequence[int]) -> Optional[List[Swap]]:
    """The fewest rank-3 leading-block swaps (``[M, N, Q]`` transposed ``(1, 0, 2)``, the last
    dim always in ``Q``) taking ``range(r)`` to ``perm``; None for a perm that moves its last dim,
    or that is one such swap or less already (rank < 4)."""
    plan = _swap_plan(tuple(int(p) for p in perm))
    return None if plan is None else list(plan)


@functools.lru_cache(maxsize=1024)
def _swap_plan(perm: Tuple[int, ...]) -> Optional[Tuple[Swap, ...]]:
    r = len(perm)
    if r < 4 or r > MAX_RANK or perm[-1] != r - 1:
        return None
    start, goal = tuple(range(r)), tuple(perm)
    came: Dict[tuple, Optional[Tuple[tuple, Swap]]] = {start: None}
    todo = deque([start])
    while todo:
        order = todo.popleft()
        if order == goal:
            break
        for i in range(1, r - 1):
            for j in range(i + 1, r):  # the last dim stays in the trailing block
                nxt = order[i:j] + order[:i] + order[j:]
                if nxt not in came:
                    came[nxt] = (order, (i, j))
                    todo.append(nxt)
    plan: List[Swap] = []
    order = goal
    while came[order] is not None:
        order, swap = came[order]
        plan.append(swap)
    return tuple(plan[::-1])


def swap_views(shape: Sequence[int], plan: Sequence[Swap]) -> List[List[int]]:
    """The rank-3 view ``[M, N, Q]`` each swap of ``plan`` transposes, starting from ``shape``."""
    order = list(range(len(shape)))
    views = []
    for i, j in plan:
        dims = [shape[d] for d in order]
        views.append([math.prod(dims[:i]), math.prod(dims[i:j]), math.prod(dims[j:])])
        order = order[i:j] + order[:i] + order[j:]
    return views
