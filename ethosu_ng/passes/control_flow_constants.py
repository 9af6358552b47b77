# SPDX-License-Identifier: BSD-3-Clause
"""Uniform constants inside the graphs a ``cond`` or ``while_loop`` calls, written as ``full``.

Quantizing folds a constant operand (``x + 1.0``, a ``torch.full``, a mean's divisor) into a
tensor attribute of the graph that uses it. In a graph that is, or contains, a nested ``cond``,
``torch.export``'s decomposition fails on that attribute ("Attempting to use FunctionalTensor
on its own"): upstream's nested-cond case could not be exported after quantization. A tensor
whose elements are all equal is the same as ``full(shape, value, dtype)``, which traces at any
depth; upstream's lowering writes such attributes as ``full`` too (``ControlFlowConstInlinePass``).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule


def inline_uniform_constants(gm: GraphModule, _depth: int = 0) -> int:
    """Replace each uniform tensor attribute read in a graph called by control flow (at any depth
    below ``gm``) with ``full``; return how many were replaced."""
    replaced = 0
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target, None)
        if isinstance(value, GraphModule):
            replaced += inline_uniform_constants(value, _depth + 1)
            continue
        if _depth == 0 or not isinstance(value, torch.Tensor) or value.numel() == 0:
            continue
        first = value.flatten()[0]
        if not bool((value == first).all()):
            continue
        with gm.graph.inserting_before(node):
            full = gm.graph.call_function(
                torch.ops.aten.full.default,
                (list(value.shape), first.item()),
                {"dtype": value.dtype},
            )
        node.replace_all_uses_with(full)
        gm.graph.erase_node(node)
        replaced += 1
    if replaced:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return replaced
