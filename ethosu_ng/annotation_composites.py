# SPDX-License-Identifier: BSD-3-Clause
"""Decompose, before annotation, the composite ops upstream's annotators do not know.

Upstream's Arm quantizer annotates the ops it names, after its own decompositions
(``transform_for_annotation``). An op outside both, such as ``addcmul`` (ConvNeXt-V2's global
response norm: ``x + addcmul(bias, weight, x * n)``), gets no observer and stays float; ExecuTorch
decomposes it later into ``mul``/``add`` on float operands, which run on the CPU and split the
partition (timm ``convnextv2_atto`` on ethos-u55-128: 13 partitions). Any such op that PyTorch's
core ATen decomposition table writes in ops upstream does annotate is decomposed here instead,
so its parts are annotated, calibrated and delegated like the same ops written by hand. Values
are those of the decomposition ExecuTorch would apply anyway. An op whose decomposition needs
an op upstream does not annotate keeps its node (``roll``, lowered whole by the partitioner).
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import FrozenSet

import torch
from torch.fx import GraphModule, Node

# Upstream modules whose source names every op its annotators handle.
_ANNOTATOR_MODULES = (
    "executorch.backends.arm.quantizer.quantization_annotator",
    "executorch.backends.arm.quantizer.arm_quantizer_utils",
    "executorch.backends.arm.quantizer.arm_quantizer",
)
# Meta that says where a node comes from: the decomposed nodes keep their composite's.
_PROVENANCE = ("nn_module_stack", "stack_trace", "source_fn_stack", "custom", "from_node")
_MAX_ROUNDS = 4
# Ops upstream's own transform for annotation rewrites into annotated ones (a division as a
# reciprocal and a multiplication), which runs again after a decomposition here.
_REWRITTEN_BY_UPSTREAM = frozenset({torch.ops.aten.div.Tensor, torch.ops.aten.div.Scalar})


@functools.cache
def annotated_ops() -> FrozenSet[torch._ops.OpOverload]:
    """Every ATen overload upstream's annotator modules name in their source."""
    import importlib

    found = set()
    for name in _ANNOTATOR_MODULES:
        src = inspect.getsource(importlib.import_module(name))
        for op, overload in re.findall(r"aten\.(\w+)\.(\w+)", src):
            packet = getattr(torch.ops.aten, op, None)
            target = getattr(packet, overload, None) if packet is not None else None
            if isinstance(target, torch._ops.OpOverload):
                found.add(target)
    return frozenset(found)


@functools.cache
def _table():
    from torch._decomp import core_aten_decompositions

    return core_aten_decompositions()


def _decomposable(node: Node) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if node.target in annotated_ops() or node.target not in _table():
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not val.is_floating_point():
        return False
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    return all(isinstance(v, torch.Tensor) and _static(v) for v in vals + [val])


def _static(val: torch.Tensor) -> bool:
    """Sizes and strides known numbers (a dynamic dimension stays for ExecuTorch to decompose)."""
    try:
        [int(d) for d in (*val.shape, *val.stride())]
    except Exception:  # noqa: BLE001 - a symbolic size that will not specialize
        return False
    return True


def _decompose(gm: GraphModule, node: Node) -> bool:
    """Replace ``node`` by its decomposition if every op in it is one upstream annotates;
    return whether it did (an op lowered whole elsewhere, e.g. ``roll``, keeps its node)."""
    import operator

    from torch.fx.experimental.proxy_tensor import make_fx

    tensors = [a for a in node.all_input_nodes]
    examples = []
    for a in tensors:
        v = a.meta.get("val")
        shape, stride = [int(d) for d in v.shape], [int(d) for d in v.stride()]
        examples.append(torch.empty_strided(shape, stride, dtype=v.dtype))

    def call(*values):
        swap = dict(zip(tensors, values))
        args = torch.fx.node.map_arg(node.args, lambda n: swap[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: swap[n])
        return node.target(*args, **kwargs)

    traced = make_fx(call, decomposition_table=_table(), tracing_mode="fake")(*examples)
    parts = {n.target for n in traced.graph.nodes if n.op == "call_function"}
    if not parts or not parts <= annotated_ops() | _REWRITTEN_BY_UPSTREAM | {operator.getitem}:
        return False
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    env = dict(zip(placeholders, tensors))
    with gm.graph.inserting_before(node):
        for n in traced.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                result = torch.fx.node.map_arg(n.args[0], lambda m: env[m])
                break
            if n.op == "get_attr":  # a constant the decomposition made
                name = f"_decomposed_{node.name}_{n.target}"
                setattr(gm, name, getattr(traced, n.target))
                new = gm.graph.get_attr(name)
            else:
                new = gm.graph.node_copy(n, lambda m: env[m])
            for key in _PROVENANCE:
                if key in node.meta:
                    new.meta[key] = node.meta[key]
            env[n] = new
    node.replace_all_uses_with(result)
    gm.graph.erase_node(node)
    return True


def decompose_unannotated_composites(gm: GraphModule) -> int:
    """Decompose every float node whose op upstream does not annotate, which PyTorch's core ATen
    table writes in ops upstream does annotate (``addcmul`` as ``mul`` and ``add``), until none
    is left; returns how many were decomposed."""
    done, kept = 0, set()
    for _ in range(_MAX_ROUNDS):
        found = [n for n in gm.graph.nodes if n not in kept and _decomposable(n)]
        if not found:
            break
        for node in found:
            if _decompose(gm, node):
                done += 1
            else:
                kept.add(node)
    if done:
        gm.graph.lint()
        gm.recompile()
    return done
