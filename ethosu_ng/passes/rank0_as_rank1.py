# SPDX-License-Identifier: BSD-3-Clause
"""Rank-0 tensors inside a partition carried as rank 1, shape [1].

Upstream's TOSA lowering cannot take a rank-0 tensor between two operators: a view to ``[]``
becomes a ``CONST_SHAPE(())`` that the edge verifier rejects (``InternalError: While executing
%tosa_const_shape_default ... args = ((),)``), so a ``select`` on a 1-D tensor, a reduction to a
scalar (``mean``/``sum``/``amax``/``amin``/``any`` over every dimension) or a ``cond`` predicate
could not be delegated. Upstream unsqueezes rank-0 parameters and buffers to [1]
(``UnsqueezeScalarPlaceholdersPass``); this does the same for every tensor of the partition
before upstream's lowering sees it: placeholders (inputs and constants), and each operator whose
result would be rank 0 is rewritten to produce [1] (a view to ``[]`` views to ``[1]``; a
reduction keeps its dims and views to ``[1]``; ``select`` on a 1-D tensor is a one-element
``slice``; a ``squeeze`` to rank 0 is a view). A [1] operand broadcasts as a rank-0 one does,
so the elementwise operators after it need no change; an operator whose result would otherwise
change shape gets a view back to the shape it had. The delegate's declared IO keeps rank 0: one
element, the same bytes (``compiler/io_check.py`` accepts a rank-changing reshape at the
boundary).
"""

from __future__ import annotations

import operator
from typing import Dict, List

import torch
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.adapters.exir import edge_op
from ethosu_ng.ops import is_per_tensor_quantize

aten = torch.ops.aten

# Full reductions without a ``dim`` argument: the dim form that keeps dims.
_WITH_DIMS = {
    edge_op(aten.any.default): edge_op(aten.any.dims),
    edge_op(aten.sum.default): edge_op(aten.sum.dim_IntList),
    edge_op(aten.mean.default): edge_op(aten.mean.dim),
    edge_op(aten.max.default): edge_op(aten.amax.default),
    edge_op(aten.min.default): edge_op(aten.amin.default),
}
_SQUEEZES = {
    edge_op(aten.squeeze_copy.default),
    edge_op(aten.squeeze_copy.dim),
    edge_op(aten.squeeze_copy.dims),
}
_RESHAPES = {edge_op(aten.view_copy.default)}


def _is_rank0(val) -> bool:
    return isinstance(val, torch.Tensor) and val.dim() == 0


def _val(a):
    return a.meta.get("val") if isinstance(a, Node) else a


def _shape_of(node: Node):
    val = node.meta.get("val")
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def carry_rank0_as_rank1(program: ExportedProgram) -> bool:
    """Rewrite ``program`` (a partition, edge dialect) in place so that no tensor in it is rank
    0. Returns whether anything changed."""
    graph = program.graph_module.graph
    if not any(_is_rank0(n.meta.get("val")) for n in graph.nodes):
        return False
    fake_mode = detect_fake_mode(
        [n.meta["val"] for n in graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    )
    sig = program.graph_signature
    constant_of = {
        **sig.inputs_to_parameters,
        **sig.inputs_to_buffers,
        **sig.inputs_to_lifted_tensor_constants,
    }
    changed: set = set()
    renamed: Dict[str, str] = {}
    for node in list(graph.nodes):
        if node.op == "placeholder":
            if _is_rank0(node.meta.get("val")):
                name = constant_of.get(node.name)
                for store in (program.state_dict, program.constants):
                    if name is not None and name in store:
                        store[name] = store[name].reshape(1)
                with fake_mode:
                    node.meta["val"] = torch.empty((1,), dtype=node.meta["val"].dtype)
                changed.add(node)
            continue
        if node.op != "call_function":
            continue
        original = node.meta.get("val")
        rewritten = _rewrite_rank0_producer(graph, node) if _is_rank0(original) else False
        if not rewritten and not any(a in changed for a in node.all_input_nodes):
            continue
        try:
            new_val = _fake_run(node, fake_mode)
        except Exception:  # noqa: BLE001  (an op that needs its rank-0 operand keeps it)
            _restore_rank0_operands(graph, node, changed, fake_mode)
            continue
        node.meta["val"] = new_val
        node.meta.pop("tensor_meta", None)
        if not isinstance(new_val, torch.Tensor) or not isinstance(original, torch.Tensor):
            changed.add(node)  # a tuple: its getitem nodes take their shapes from it
            continue
        want = (1,) if original.dim() == 0 else tuple(original.shape)
        if tuple(new_val.shape) == want:
            if original.dim() == 0:
                changed.add(node)
            continue
        if (
            original.dim() == 0
            and node.users
            and all(is_per_tensor_quantize(u) for u in node.users)
        ):
            # Upstream folds a quantize into the op it directly follows: the view to [1] goes
            # after the quantize (on the int8 tensor), not between them.
            changed.add(node)
            continue
        if new_val.numel() != original.numel():
            raise ValueError(
                f"rank-0 as rank-1: {node.name} ({node.target}) changed from "
                f"{list(original.shape)} to {list(new_val.shape)}"
            )
        was_output = node in graph.output_node().all_input_nodes
        view = _view_after(graph, node, list(want), fake_mode)
        if was_output:
            renamed[node.name] = view.name
        if original.dim() == 0:
            changed.add(view)
    for spec in sig.output_specs:
        arg = spec.arg
        if getattr(arg, "name", None) in renamed:
            arg.name = renamed[arg.name]
    graph.lint()
    program.graph_module.recompile()
    return True


def _rewrite_rank0_producer(graph, node: Node) -> bool:
    """Make ``node``, whose result is rank 0, produce a tensor of one element and rank >= 1."""
    target, args = node.target, list(node.args)
    src = args[0] if args else None
    src_val = _val(src)
    if target in _RESHAPES:
        node.args = (src, [1])
        return True
    if target in _SQUEEZES:
        node.target, node.args, node.kwargs = edge_op(aten.view_copy.default), (src, [1]), {}
        return True
    if target == edge_op(aten.select_copy.int) and isinstance(src_val, torch.Tensor):
        dim, index = args[1], args[2]
        size = src_val.shape[dim]
        index = index + size if index < 0 else index
        node.target = edge_op(aten.slice_copy.Tensor)
        node.args = (src, dim, index, index + 1, 1)
        return True
    if target in (edge_op(aten.full.default),) and list(args[0]) == []:
        node.args = ([1], *args[1:])
        return True
    if target == edge_op(aten.scalar_tensor.default):
        node.target = edge_op(aten.full.default)
        node.args = ([1], args[0])
        return True
    if target in _WITH_DIMS and isinstance(src_val, torch.Tensor) and src_val.dim() >= 1:
        dims = list(range(src_val.dim()))
        node.target = _WITH_DIMS[target]
        node.args = (src, dims, True)
        return True
    schema = getattr(target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "keepdim" in names and isinstance(src_val, torch.Tensor) and src_val.dim() >= 1:
        # Positionally: upstream's passes read keepdim from the args (convert_minmax_pass).
        k = names.index("keepdim")
        kwargs = dict(node.kwargs)
        for i in range(len(args), k + 1):
            arg = schema.arguments[i]
            args.append(kwargs.pop(arg.name, arg.default_value))
        args[k] = True
        if "dim" in names and names.index("dim") < k:
            # An empty dim list reduces every dim; upstream's ConvertMinMaxPass reads it as none.
            d = names.index("dim")
            if args[d] is None or (isinstance(args[d], (list, tuple)) and not args[d]):
                args[d] = list(range(src_val.dim()))
        node.args, node.kwargs = tuple(args), kwargs
        return True
    return False


def _fake_run(node: Node, fake_mode):
    args = torch.fx.node.map_arg(node.args, lambda a: a.meta["val"])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: a.meta["val"])
    if node.target is operator.getitem:
        return args[0][args[1]]
    with fake_mode:
        return node.target(*args, **kwargs)


def _view_after(graph, node: Node, shape: List[int], fake_mode) -> Node:
    """A view of ``node`` to ``shape`` that takes over all of its users."""
    with graph.inserting_after(node):
        view = graph.call_function(edge_op(aten.view_copy.default), (node, shape))
    view.meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}
    with fake_mode:
        view.meta["val"] = node.meta["val"].reshape(shape)
    node.replace_all_uses_with(view, delete_user_cb=lambda user: user is not view)
    return view


def _restore_rank0_operands(graph, node: Node, changed: set, fake_mode) -> None:
    """Give ``node`` its operands at rank 0 again (an op this module cannot carry at rank 1)."""
    for a in list(node.all_input_nodes):
        if a in changed:
            with graph.inserting_before(node):
                view = graph.call_function(edge_op(aten.view_copy.default), (a, []))
            view.meta = {k: v for k, v in a.meta.items() if k not in ("val", "tensor_meta")}
            with fake_mode:
                view.meta["val"] = a.meta["val"].reshape(())
            node.replace_input_with(a, view)
