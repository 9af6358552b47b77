# SPDX-License-Identifier: BSD-3-Clause
"""Reshaping ops read their input in the default (contiguous) dim order.

ExecuTorch's portable kernels for the ops that reshape or reorder a tensor (``view_copy``,
``permute_copy``, ``unsqueeze_copy`` ..., and what ``pixel_shuffle`` / ``pixel_unshuffle``
decompose to) walk their input's bytes as if it were laid out contiguously. Fed a tensor in
another dim order (a channels-last program input, or a ``.contiguous(memory_format=
torch.channels_last)`` in the model), they return wrong values silently (a channels-last
``pixel_shuffle`` on the CPU: 222 LSB off) or fail at execute (``permute_copy``: error 0x12).
Eager PyTorch reads such a view through its strides.

So each such op whose input is not in the contiguous dim order (as ExecuTorch reads it from
the strides: a tensor whose size-1 dims make it contiguous to torch is still channels-last
there) gets a ``clone`` to the contiguous format first (on the CPU, ``_clone_dim_order``, whose
kernel converts between dim orders; in a delegate, a data-movement op). Where the op's result
was itself channels-last (``pixel_shuffle`` keeps its input's memory format), a clone back to
channels-last follows, so the program's layout is unchanged. Programs whose tensors are all in
the contiguous dim order are untouched.
"""

from __future__ import annotations

from typing import List

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten

# The ops whose CPU kernels (or decompositions) read their first input as contiguous bytes.
REORDERING_OPS = frozenset(
    {
        aten.view.default,
        aten._unsafe_view.default,
        aten.reshape.default,
        aten.flatten.using_ints,
        aten.unflatten.int,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.unsqueeze.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.pixel_shuffle.default,
        aten.pixel_unshuffle.default,
    }
)


def _dim_order(t: torch.Tensor) -> tuple:
    """The dim order ExecuTorch gives ``t`` (from its strides: a tensor whose size-1 dims make
    it both contiguous and channels-last to torch is channels-last here when its strides say
    so)."""
    try:
        return tuple(t.dim_order())
    except (RuntimeError, ValueError):  # strides of no dim order (an expanded view)
        return tuple(range(t.dim()))


def _dense_channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and _dim_order(t) == (0, 2, 3, 1)


def _clone(graph, x: Node, fmt, meta_from: Node) -> Node:
    val = x.meta["val"]
    c = graph.call_function(aten.clone.default, (x,), {"memory_format": fmt})
    c.meta = {k: v for k, v in meta_from.meta.items() if k not in ("val", "tensor_meta")}
    with val.fake_mode:
        c.meta["val"] = aten.clone.default(val, memory_format=fmt)
    return c


class ContiguousBeforeViewPass(ProgramPass):
    modifies = frozenset({Aspect.CONTIGUITY, Aspect.DATA_MOVEMENT})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.rewritten: List[str] = []
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in REORDERING_OPS or not node.args:
                continue
            x = node.args[0]
            val = x.meta.get("val") if isinstance(x, Node) else None
            out = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor):
                continue
            if _dim_order(val) == tuple(range(val.dim())):
                continue
            with graph.inserting_before(node):
                c = _clone(graph, x, torch.contiguous_format, node)
            node.update_arg(0, c)
            with val.fake_mode:
                new_out = node.target(c.meta["val"], *node.args[1:], **node.kwargs)
            node.meta["val"] = new_out
            node.meta.pop("tensor_meta", None)
            if _dense_channels_last(out) and not _dense_channels_last(new_out):
                users = list(node.users)
                with graph.inserting_after(node):
                    back = _clone(graph, node, torch.channels_last, node)
                for u in users:
                    u.replace_input_with(node, back)
            self.rewritten.append(node.name)
        if self.rewritten:
            graph.lint()
            program.graph_module.recompile()
        return program
