# SPDX-License-Identifier: BSD-3-Clause
"""SLICEs of a TRANSPOSE -> the same TRANSPOSE of each slice of its input.

A qkv split along a merged axis (levit's ``qkv.view(B, N, heads, -1).split([d, d, dv], dim=3)``
then ``q.permute(0, 2, 1, 3)``, ``k.permute(0, 2, 3, 1)``) reaches Vela as a transpose of the
whole qkv tensor per permutation, read only by slices that keep part of it: q and v slice one
transpose, k another, so every element is moved twice (a transpose per permutation, a
MemoryCopy per slice). Slicing the input first and transposing each slice moves the sliced
elements only, through transposes of a fraction of the size.

Exact for any permutation: ``slice(transpose(x, perm), start, size)`` is
``transpose(slice(x, start', size'), perm)`` with ``start'[perm[i]] = start[i]`` (likewise
``size``). A RESHAPE between the transpose and a slice that only adds or drops size-1
dimensions is looked through (the slice's non-unit dimensions are the transpose's, in order);
the slice is then followed by that reshape's shape.

Not applied to a transpose of rank 5 or more: the slice it would make is of that rank, and
Vela 5.1 crashes on some rank-5 slices for ethos-u55 (``passes/slice_on_merged_axis.py``).
Applied only where the transpose goes away (every reader of it, or of such a reshape of it, is a
slice; neither is a graph output) and fewer elements are moved after than before. Vela reads a
slice in place where its readers take a sliced IFM (a convolution, pooling or elementwise op:
regor's ``MoveSplitSliceToConsumer``); a slice read by a reshape, a transpose, a copy-like op or
the graph output is a MemoryCopy of its own. Before: the transpose writes every element and each
slice not read in place copies its part. After: each slice, read by its new transpose, is a
MemoryCopy; on Ethos-U85 Vela does the copy and the transpose in one pass. On Ethos-U55/U65 they
are two passes, and the strided copy of a window of the untransposed tensor costs about what a
copy after the transpose would: there it applies only where no slice is read in place and the
slices keep less than half of the tensor (a slice read in place, moved, cost more even at a
third; one copied to the graph output, at 0.71, 1.2 % more: Vela's estimate over drawn windows
and readers, ``test_a_slice_of_the_layout_transpose_never_costs_more``). A stride-2
convolution without padding on a network's NCHW input (its TOSA slices off the last row and
column after the layout transpose) keeps the transpose on U55: moved before, the slice costs a
MemoryCopy the convolution's read of it did not (squeezenet1_1's first layer, 151,600
cycles on ethos-u55-128).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from ethosu_ng.tosa_optimize.graph import Graph, Operator, Tensor
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import perm_of
from ethosu_ng.tosa_optimize.rewrites.drop_identity_data_movement import (
    DropIdentityDataMovement,
)
from ethosu_ng.tosa_optimize.rewrites.merge_reshapes import MergeReshapes

MAX_RANK = 4
# Readers Vela does not hand a slice to (regor's ``MoveSplitSliceToConsumer``: reshapes,
# transposes, tiles, gathers, scatters, control flow, CPU ops, and a reader that slices itself);
# the slice stays a MemoryCopy of its own.
COPYING_READERS = frozenset(
    {
        "RESHAPE",
        "IDENTITY",
        "TRANSPOSE",
        "SLICE",
        "TILE",
        "GATHER",
        "SCATTER",
        "COND_IF",
        "WHILE_LOOP",
        "CUSTOM",
    }
)
# Families on which Vela moves a slice and the transpose that reads it in one pass.
ONE_PASS_FAMILIES = ("ethos-u85",)
Window = Tuple[List[int], List[int]]  # (start, size)


def non_unit(shape: Sequence[int]) -> List[int]:
    return [k for k, d in enumerate(shape) if d != 1]


def is_unit_dim_reshape(src: Sequence[int], dst: Sequence[int]) -> bool:
    """``reshape(x, dst)`` only adds or drops size-1 dimensions of ``x``."""
    return [src[k] for k in non_unit(src)] == [dst[k] for k in non_unit(dst)]


def window_through_unit_reshape(src: Sequence[int], dst: Sequence[int], win: Window) -> Window:
    """The window on ``src`` that a window on ``reshape(src, dst)`` (a unit-dim reshape) reads."""
    start, size = [0] * len(src), [1] * len(src)
    for a, b in zip(non_unit(src), non_unit(dst)):
        start[a], size[a] = win[0][b], win[1][b]
    return start, size


def read_in_place(graph: Graph, sl: Operator, consumers) -> bool:
    """Vela reads ``sl``'s window where its readers are (no MemoryCopy of its own)."""
    y = sl.outputs[0]
    readers = consumers.get(y, [])
    return (
        bool(readers)
        and y not in graph.outputs
        and all(r.op not in COPYING_READERS for r in readers)
    )


def window_before_transpose(perm: Sequence[int], win: Window) -> Window:
    """The window on ``x`` whose transpose by ``perm`` is ``win`` on ``transpose(x, perm)``."""
    start, size = [0] * len(perm), [0] * len(perm)
    for i, p in enumerate(perm):
        start[p], size[p] = win[0][i], win[1][i]
    return start, size


class SliceBeforeTranspose(TosaRewrite):
    # Merged reshapes and dropped identities first: the reshape it looks through is then one op.
    runs_after = (MergeReshapes, DropIdentityDataMovement)

    def apply(self, graph: Graph) -> int:
        changed = 0
        # The maps are rebuilt after a change only: per candidate they made this quadratic.
        alive = {id(o) for o in graph.ops}
        consumers = graph.consumers()
        for op in list(graph.ops):
            if op.op != "TRANSPOSE" or id(op) not in alive or graph.is_constant(op.inputs[0]):
                continue
            plan = self._plan(graph, op, consumers)
            if plan is None:
                continue
            for sl, win in plan:
                self._replace(graph, op, sl, win)
            changed += 1
            alive, consumers = {id(o) for o in graph.ops}, graph.consumers()
        return changed

    @staticmethod
    def _window(graph: Graph, sl: Operator) -> Optional[Window]:
        start, size = (graph.const_array(t) for t in sl.inputs[1:3])
        if start is None or size is None:
            return None
        return [int(v) for v in start], [int(v) for v in size]

    def _plan(
        self, graph: Graph, t: Operator, consumers
    ) -> Optional[List[Tuple[Operator, Window]]]:
        """(slice, its window on the transpose's output) for every slice reading it; None if
        the rewrite does not apply (see the module docstring)."""
        y = t.outputs[0]
        t_shape = graph.shape_of(y)
        if y in graph.outputs or len(t_shape) > MAX_RANK:
            return None
        plan: List[Tuple[Operator, Window]] = []
        for reader in consumers.get(y, []):
            if reader.op == "SLICE" and reader.inputs[0] == y:
                win = self._window(graph, reader)
                if win is None:
                    return None
                plan.append((reader, win))
                continue
            if reader.op != "RESHAPE" or reader.inputs[0] != y:
                return None
            r = reader.outputs[0]
            r_shape = graph.shape_of(r)
            if r in graph.outputs or not is_unit_dim_reshape(t_shape, r_shape):
                return None
            for sl in consumers.get(r, []):
                if sl.op != "SLICE" or sl.inputs[0] != r:
                    return None
                win = self._window(graph, sl)
                if win is None:
                    return None
                plan.append((sl, window_through_unit_reshape(t_shape, r_shape, win)))
        if not plan:
            return None
        in_place = [read_in_place(graph, sl, consumers) for sl, _ in plan]
        one_pass = self.family in ONE_PASS_FAMILIES
        if not one_pass and any(in_place):
            return None
        kept = sum(math.prod(win[1]) for _, win in plan)
        moved_after = kept if one_pass else 2 * kept
        # Ethos-U55/U65: the strided copy of a window of the untransposed tensor costs about
        # what the copy of the same window after the transpose saves (Vela's estimate).
        moved_before = math.prod(t_shape) + (
            sum(math.prod(win[1]) for (_, win), free in zip(plan, in_place) if not free)
            if one_pass
            else 0
        )
        if moved_after >= moved_before:
            return None
        return plan

    @staticmethod
    def _replace(graph: Graph, t: Operator, sl: Operator, win: Window) -> None:
        """x -> SLICE(window before the transpose) -> TRANSPOSE -> ``sl``'s output, ``sl``
        becoming the reshape to its own shape (an identity reshape goes in a later rewrite)."""
        x, perm = t.inputs[0], perm_of(t)
        start, size = window_before_transpose(perm, win)
        y = sl.outputs[0]
        part = graph.fresh_name(f"{y}_before_transpose")
        graph.tensors[part] = Tensor(part, list(size), graph.tensors[x].dtype)
        new_slice = Operator("SLICE", [x], [part], dict(sl.attr), source=sl.source)
        graph.insert_before(sl, new_slice)
        new_slice.inputs.append(graph.add_const_shape(new_slice, f"{part}_start", start))
        new_slice.inputs.append(graph.add_const_shape(new_slice, f"{part}_size", size))
        moved = graph.insert_transpose(sl, part, f"{y}_transposed", perm, t.attr)
        graph.become_reshape(sl, moved)
