# SPDX-License-Identifier: BSD-3-Clause
"""Rewrite alias spellings of ops upstream's annotators know into the spelling they know.

Upstream's Arm annotators match op overloads exactly. ``torch.export`` keeps several ops in a
spelling that is not in their lists although the same op is: ``clamp_min``/``clamp_max``/``clip``
are ``clamp``, ``expand_as`` is ``expand``, ``relu6`` is ``hardtanh(0, 6)``. Left alone, such a
node gets no quantization annotation; between two annotated ops it stays float
(``DQ -> clamp_min -> expand_as -> Q``), a chain ``MarkQuantizedIslandsPass`` cannot mark (its
inner edge carries no qparams), so the partitioner cuts the model around it ("Node was not marked
as quantized"). ``F.normalize`` (``norm -> clamp_min(eps) -> expand_as -> div``) does exactly
that inside attention.

After the rewrite the node is the op upstream annotates (shared input/output qparams for clamp
and expand) and lowers; values are unchanged (same ATen semantics). Found by exporting common
idioms between two linear layers and listing the call_function nodes left without an observer
on either side (``tests/test_quantized_islands.py`` keeps one model per idiom).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten

Rewrite = Callable[[Node], Optional[Tuple[object, tuple, dict]]]


def _arg(n: Node, k: int, name: str, default=None):
    if len(n.args) > k:
        return n.args[k]
    return n.kwargs.get(name, default)


def _clamp_min(overload) -> Rewrite:
    return lambda n: (overload, (n.args[0], _arg(n, 1, "min"), None), {})


def _clamp_max(overload) -> Rewrite:
    return lambda n: (overload, (n.args[0], None, _arg(n, 1, "max")), {})


def _clip(overload) -> Rewrite:
    return lambda n: (overload, (n.args[0], _arg(n, 1, "min"), _arg(n, 2, "max")), {})


def _expand_as(n: Node):
    other = n.args[1]
    val = other.meta.get("val") if isinstance(other, Node) else None
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
        return None  # symbolic shape: leave it
    return aten.expand.default, (n.args[0], list(val.shape)), {}


ALIASES: Dict[object, Rewrite] = {
    aten.clamp_min.default: _clamp_min(aten.clamp.default),
    aten.clamp_max.default: _clamp_max(aten.clamp.default),
    aten.clamp_min.Tensor: _clamp_min(aten.clamp.Tensor),
    aten.clamp_max.Tensor: _clamp_max(aten.clamp.Tensor),
    aten.clip.default: _clip(aten.clamp.default),
    aten.clip.Tensor: _clip(aten.clamp.Tensor),
    aten.expand_as.default: _expand_as,
    aten.relu6.default: lambda n: (aten.hardtanh.default, (n.args[0], 0.0, 6.0), {}),
}


def canonicalize_aliases(gm: GraphModule) -> int:
    """Replace every ``ALIASES`` node of ``gm`` by its canonical op; returns how many."""
    changed = 0
    for n in list(gm.graph.nodes):
        rewrite = ALIASES.get(n.target) if n.op == "call_function" else None
        new = rewrite(n) if rewrite is not None else None
        if new is None:
            continue
        target, args, kwargs = new
        with gm.graph.inserting_before(n):
            m = gm.graph.call_function(target, args, kwargs)
        m.meta = dict(n.meta)
        n.replace_all_uses_with(m)
        gm.graph.erase_node(n)
        changed += 1
    if changed:
        gm.graph.lint()
        gm.recompile()
    return changed
