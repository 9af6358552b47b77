# SPDX-License-Identifier: BSD-3-Clause
"""Slice a rank >= 5 tensor on a merged axis of a rank <= 3 view instead.

Keeps NPU coverage on Ethos-U55 for attention that splits q/k/v out of a 5-D permute (Swin's
``q, k, v = permute(reshape(qkv), 5-D).unbind(0)`` then ``q * scale``). Measured with Vela 5.1.0
for ethos-u55-128: a rank-5 TOSA ``SLICE`` on the outermost dim, then the ``RESHAPE`` that drops
that dim to rank 4 with a non-unit batch, then an elementwise op (MUL, ADD, CLAMP) makes Vela
SIGSEGV; e.g. ``x[1] * 0.5`` for ``x`` of shape (3, 4, 2, 16, 8). The same data sliced out of a
rank-2/3 view compiles.

A slice (step 1) or select on dim ``d`` of ``x`` with shape ``S`` (rank ``r >= 5``, ``d <= r - 3``)
is exactly

    reshape(x, [prod(S[:d]), S[d] * m, S[-1]])[:, a * m : b * m]  ->  reshape(out shape)

with ``m = prod(S[d+1:-1])``: the rows of index ``a .. b-1`` along ``d`` are one contiguous run
of the merged axis. The axis is deliberately merged with the dims inside it: the TOSA lowering's
view propagation moves a view across a slice when the sliced axis maps to a single source dim,
which would rebuild the rank-5 slice (measured: a plain ``[3, 1024]`` view was undone that way);
an axis spanning several source dims cannot be moved back. Pure data movement with no
arithmetic: it commutes exactly with per-tensor (de)quantization, so
CommuteQDQThroughPassThroughPass still runs it in int8 on the NPU.

``unbind``, ``split`` and ``chunk`` along such a dim become one such slice per output used
(``x.split(1)[1].squeeze(0) * 0.5`` crashed Vela too). Left alone, because they compiled in the
same measurements or cannot be rewritten exactly: slices with a step that pick more than one
row, slices of the two innermost dims, ``m == 1`` and symbolic shapes. TargetLimits keeps on
the CPU (U55) a crashing slice that a decomposition creates after this pass.
"""

from __future__ import annotations

import math
import operator
from typing import List, Optional, Tuple

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten
_SLICE, _SELECT = aten.slice.Tensor, aten.select.int
# Multi-output slicing: (op, position of its dim argument); outputs are read through getitem.
_MULTI = {
    aten.unbind.int: 1,
    aten.split.Tensor: 2,
    aten.split_with_sizes.default: 2,
    aten.chunk.default: 2,
}


def _arg(node: Node, k: int, name: str, default):
    return node.args[k] if len(node.args) > k else node.kwargs.get(name, default)


def _plan(x: Node, dim) -> Optional[Tuple[List[int], int, int, int]]:
    """(merged shape, merged axis, m, S[d]) when slicing ``x`` on ``dim`` should be rewritten."""
    val = x.meta.get("val") if isinstance(x, Node) else None
    if not isinstance(val, torch.Tensor) or val.dim() < 5 or not isinstance(dim, int):
        return None
    shape = list(val.shape)
    if not all(isinstance(s, int) for s in shape):
        return None
    r = len(shape)
    d = dim % r
    if d > r - 3:
        return None
    m = math.prod(shape[d + 1 : r - 1])
    if m == 1:
        return None
    lead = [math.prod(shape[:d])] if d > 0 else []
    return lead + [shape[d] * m, shape[-1]], len(lead), m, shape[d]


class SliceOnMergedAxisPass(ProgramPass):
    """See module docstring. ``__call__`` mutates the program in place and returns it."""

    # The slices roll lowers to are rewritten too.
    modifies = frozenset({Aspect.DATA_MOVEMENT})
    requires = frozenset({Aspect.SLICES_AND_CATS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.rewritten = 0
        self._views = {}
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            if node.target in (_SLICE, _SELECT):
                x, dim = node.args[0], _arg(node, 1, "dim", 0)
                plan = _plan(x, dim)
                rows = self._rows(node, plan[3]) if plan else None
                if rows is None or not isinstance(node.meta.get("val"), torch.Tensor):
                    continue
                self._replace(graph, node, x, plan, *rows, anchor=node)
                self.rewritten += 1
            elif node.target in _MULTI:
                x, dim = node.args[0], _arg(node, _MULTI[node.target], "dim", 0)
                plan = _plan(x, dim)
                if plan is not None and self._multi(graph, node, x, dim, plan):
                    self.rewritten += 1
        if self.rewritten:
            graph.eliminate_dead_code()
            graph.lint()
            program.graph_module.recompile()
        return program

    @staticmethod
    def _rows(node: Node, n: int) -> Optional[Tuple[int, int]]:
        """The index range [a, b) along the sliced dim, or None if not a plain (step 1) run."""
        if node.target == _SELECT:
            i = _arg(node, 2, "index", None)
            if not isinstance(i, int) or not -n <= i < n:
                return None
            i %= n
            return i, i + 1
        start, end, step = (
            _arg(node, 2, "start", None),
            _arg(node, 3, "end", None),
            _arg(node, 4, "step", 1),
        )
        if (
            not isinstance(step, int)
            or step < 1
            or not all(v is None or isinstance(v, int) for v in (start, end))
        ):
            return None
        picked = range(*slice(start, end, step).indices(n))
        if len(picked) == 1:  # one row: the step does not matter
            return picked[0], picked[0] + 1
        return (picked[0], picked[-1] + 1) if step == 1 and picked else None

    def _multi(self, graph, node: Node, x: Node, dim: int, plan) -> bool:
        """unbind / split / chunk: each output read through getitem is a run of rows."""
        vals = node.meta.get("val")
        users = list(node.users)
        if (
            not isinstance(vals, (list, tuple))
            or not users
            or not all(isinstance(v, torch.Tensor) for v in vals)
            or not all(
                u.op == "call_function"
                and u.target == operator.getitem
                and isinstance(u.args[1], int)
                for u in users
            )
        ):
            return False
        d = dim % x.meta["val"].dim()
        sizes = [1] * len(vals) if node.target == aten.unbind.int else [v.shape[d] for v in vals]
        if sum(sizes) != plan[3]:
            return False
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        for u in users:
            k = u.args[1] % len(sizes)
            if sizes[k] == 0:
                return False
        for u in users:
            k = u.args[1] % len(sizes)
            self._replace(graph, u, x, plan, starts[k], starts[k] + sizes[k], anchor=node)
        graph.erase_node(node)
        return True

    def _replace(self, graph, node: Node, x: Node, plan, a: int, b: int, anchor: Node) -> None:
        """``node`` (``x``'s rows [a, b) along the planned dim) becomes slice -> reshape of one
        shared merged view of ``x``, created before ``anchor`` (the first slicing of ``x``)."""
        shape, axis, m, _ = plan
        val, out_val = x.meta["val"], node.meta["val"]
        base = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}
        view = self._views.get(x)
        if view is None:
            with graph.inserting_before(anchor):
                view = graph.call_function(aten.reshape.default, (x, shape))
            with val.fake_mode:
                view.meta = dict(base, val=torch.empty(shape, dtype=val.dtype))
            self._views[x] = view
        sliced = list(shape)
        sliced[axis] = (b - a) * m
        with graph.inserting_before(node):
            sl = graph.call_function(_SLICE, (view, axis, a * m, b * m))
            back = graph.call_function(aten.reshape.default, (sl, list(out_val.shape)))
        with val.fake_mode:
            sl.meta = dict(base, val=torch.empty(sliced, dtype=val.dtype))
            back.meta = dict(base, val=torch.empty(list(out_val.shape), dtype=out_val.dtype))
        node.replace_all_uses_with(back)
        graph.erase_node(node)
