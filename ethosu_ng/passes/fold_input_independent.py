# SPDX-License-Identifier: BSD-3-Clause
"""Values a model computes in ``forward`` without reading its inputs, folded to constants.

Positional encodings built from ``zeros``/``arange``/``cumsum`` at each call (EdgeNeXt's Fourier
encoding, sin-cos and rotary tables), masks built with ``triu``, a scale computed from a
parameter: the same numbers on every run. Left in the graph, they are quantized and computed like
activations, through int8 ``sin``/``cos``/``div`` at every inference: a sin-cos table added to
tokens so computed leaves the block at 7.7 dB SQNR against float, folded at 34.3 dB
(docs/accuracy.md). Folded before annotation, each is one constant the quantizer grids once.

What is folded: every value with no placeholder and no state the graph writes among its
ancestors, computed by deterministic functional ops, that an input-dependent op reads. Not
folded: a constructor alone (``full``, ``arange``: a node is as cheap as its constant, and
upstream's lowering folds it), a value read only by the graph's output, quantize/dequantize ops
already in the graph, and a value of more than ``MAX_FOLDED_ELEMENTS`` elements (its constant
would cost flash out of proportion to the ops it saves; no value of a folded cone is larger
either, which bounds the work and memory of folding).
"""

from __future__ import annotations

from typing import Dict, Set

import torch
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

# One MiB once quantized to int8: a positional encoding of 256 channels at 64x64.
MAX_FOLDED_ELEMENTS = 1 << 20


_EVAL_DROPOUT = (
    torch.ops.aten.dropout.default,
    torch.ops.aten.feature_dropout.default,
    torch.ops.aten.alpha_dropout.default,
    torch.ops.aten.feature_alpha_dropout.default,
)


def _mutates(node: Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable


def _foldable(node: Node) -> bool:
    """A deterministic functional op; a quantize/dequantize already in the graph stays (its
    integer side is what the quantizer keeps)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or _mutates(node):
        return False
    if target.namespace in ("quantized_decomposed", "pt2e_quant", "torchao"):
        return False
    if target in _EVAL_DROPOUT:  # seeded only when training: identity in eval
        return node.args[2] is False if len(node.args) > 2 else node.kwargs.get("train") is False
    return torch.Tag.nondeterministic_seeded not in target.tags


def _mutated_attrs(gm: GraphModule) -> Set[str]:
    """Attributes the graph writes (a state buffer's ``copy_``, an in-place op on a view of
    one): their reads are not constants. Conservative: every first-argument chain back from a
    mutating op."""
    written: Set[str] = set()
    for node in gm.graph.nodes:
        if not _mutates(node):
            continue
        stack = [a for a in node.args[:1] if isinstance(a, Node)]
        while stack:
            n = stack.pop()
            if n.op == "get_attr":
                written.add(n.target)
            elif n.op == "call_function":
                stack.extend(a for a in n.args[:1] if isinstance(a, Node))
    return written


def _attr(gm: GraphModule, target: str):
    """A get_attr's value; ``target`` is dotted for a submodule's parameter."""
    value = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def _small(node: Node) -> bool:
    """At most ``MAX_FOLDED_ELEMENTS`` elements (as export traced it): folding evaluates every
    value of a cone, so none may be large."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return all(not isinstance(v, torch.Tensor) or v.numel() <= MAX_FOLDED_ELEMENTS for v in vals)


def _tensor_inputs(node: Node):
    return [a for a in pytree.arg_tree_leaves(*node.args, **node.kwargs) if isinstance(a, Node)]


def fold_input_independent(gm: GraphModule) -> int:
    """Replace each input-independent value an input-dependent op reads with a constant
    attribute of ``gm``; return how many were folded."""
    written = _mutated_attrs(gm)
    constant: Set[Node] = set()
    computes: Dict[Node, bool] = {}  # node -> its cone holds an op reading a tensor
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            if node.target not in written and isinstance(_attr(gm, node.target), torch.Tensor):
                constant.add(node)
                computes[node] = False
        elif node.op == "call_function" and _foldable(node) and _small(node):
            inputs = _tensor_inputs(node)
            if all(i in constant for i in inputs):
                constant.add(node)
                computes[node] = bool(inputs)
    frontier = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and n in constant
        and computes[n]
        and any(u not in constant and u.op != "output" for u in n.users)
    ]
    if not frontier:
        return 0
    # The cones the frontier needs, evaluated in graph order (no recursion: a cone may be deep).
    needed: Set[Node] = set()
    stack = list(frontier)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(_tensor_inputs(n))
    values: Dict[Node, object] = {}
    folded = 0
    with torch.no_grad(), torch.utils._python_dispatch._disable_current_modes():
        for n in gm.graph.nodes:
            if n not in needed:
                continue
            if n.op == "get_attr":
                values[n] = _attr(gm, n.target)
            else:
                args, kwargs = pytree.tree_map_only(Node, values.__getitem__, (n.args, n.kwargs))
                values[n] = n.target(*args, **kwargs)
        for node in frontier:
            result = values[node]
            if not isinstance(result, torch.Tensor) or result.numel() > MAX_FOLDED_ELEMENTS:
                continue
            name = f"_folded_{node.name}"
            # clone() keeps a view's strides (a transposed table stays transposed): a consumer
            # then reads it as it read the computed value, and sums in the same order.
            gm.register_buffer(name, result.detach().clone())
            with gm.graph.inserting_before(node):
                attr = gm.graph.get_attr(name)
            attr.meta.update(node.meta)
            node.replace_all_uses_with(attr)
            folded += 1
    if folded:
        # Export's checks on the folded values' metadata hold (they were computed); left, they
        # would keep the computation alive.
        for node in list(gm.graph.nodes):
            if node.target is torch.ops.aten._assert_tensor_metadata.default and all(
                i in constant for i in _tensor_inputs(node)
            ):
                gm.graph.erase_node(node)
        # FX keeps a dead eval-mode dropout (its op is seeded); the folded cone is pure.
        for node in reversed(list(gm.graph.nodes)):
            if node in constant and node.op == "call_function" and not node.users:
                gm.graph.erase_node(node)
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return folded
