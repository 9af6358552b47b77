# SPDX-License-Identifier: BSD-3-Clause
"""Decompose, node by node, what executorch would otherwise decompose by retracing the program.

Lowering time, not numerics. ``to_edge_transform_and_lower`` retraces the whole program through
its decomposition table (``run_decompositions``) whenever one node of an op in that table is left
in the graph, and skips the retrace when none is. On our programs the ops left are few and their
decompositions small (``conv2d`` -> ``convolution``, ``max_pool2d`` -> ``max_pool2d_with_indices``
+ getitem, ``transpose.int`` -> ``permute``, ``_unsafe_view`` -> ``view``, ...), while the retrace
walks the whole program (deit_tiny's lowering: 149.7 -> 136.0 CPU s without it; the figures per
model are in docs/benchmarks.md).

So each such node is traced alone through the same table (``make_fx`` on the node's fake
inputs) and the traced nodes replace it, carrying its meta as a retrace's nodes do. Traces are
cached by op, constant arguments and input shapes, strides and dtypes (ranks and dtypes only for
``RANK_ONLY_OPS``), so repeated blocks trace each distinct node once. The table is the one
executorch will use: its default table without the ops the partitioner keeps whole.

A node is left to executorch's retrace (which then still runs; correct, only slower) when its
inputs are not all static-shaped fake tensors, or its trace holds what a splice cannot carry
over exactly: a constant tensor (get_attr), a mutating op, or a call other than an ATen op or
getitem.
"""

from __future__ import annotations

import operator
from typing import Any, Collection, Dict, List, Optional, Tuple

import torch
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.fx import Graph, GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.utils import _pytree as pytree

from ethosu_ng.adapters import exir

aten = torch.ops.aten
# The ops spliced: those our programs carry into edge generation that make it retrace, each
# checked against the retrace by tests/test_decompose_in_place.py. ``reshape``, ``flatten`` and
# ``chunk`` are not in the table, but functionalization writes them with ops that are (a
# non-viewable reshape as ``clone`` + ``_unsafe_view``, chunk as ``split``). Any other op is left
# to the retrace. torch.export also swaps in table entries for CompositeImplicitAutograd ops
# while it traces (``linear`` on a permuted input then becomes ``bmm``, where their C++ kernels
# give ``mm``); the ops here reach none such, so a plain ``make_fx`` traces them the same way.
SPLICED_OPS = frozenset(
    {
        aten.conv2d.default,
        aten.max_pool2d.default,
        aten.transpose.int,
        aten._unsafe_view.default,
        aten.split.Tensor,
        aten.reshape.default,
        aten.flatten.using_ints,
        aten.chunk.default,
    }
)
# Spliced ops whose decomposition reads only their inputs' ranks and dtypes, not sizes or
# strides: one trace serves every shape (a CNN's convolutions differ in shape, not in form).
RANK_ONLY_OPS = frozenset(
    {aten.conv2d.default, aten.max_pool2d.default, aten.transpose.int, aten._unsafe_view.default}
)
# Meta a decomposed node gets from its own trace, not from the node it replaces.
_OWN_META = ("val", "tensor_meta", "unbacked_bindings")


class DecomposeInPlacePass:
    def __init__(self, table: Dict[torch._ops.OpOverload, Any]):
        self.table = table
        self._traces: Dict[tuple, Optional[GraphModule]] = {}
        self.decomposed = 0
        self.left: List[Node] = []  # nodes of a table op left: executorch will retrace

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.decomposed, self.left = 0, []
        nodes = [
            n
            for n in graph.nodes
            if n.op == "call_function" and exir.decomposed_by_edge_generation(n.target, self.table)
        ]
        spliceable = [n for n in nodes if n.target in SPLICED_OPS]
        done = set()
        # A trace depends on its inputs' strides (a reshape is a view or a copy), and the passes
        # before this one rewire nodes without recomputing the values downstream.
        if spliceable and _propagate_values(program):
            done = {n for n in spliceable if self._splice(graph, n)}
        self.decomposed = len(done)
        self.left = [n for n in nodes if n not in done and n.target in self.table]
        if self.decomposed:
            graph.lint()
            program.graph_module.recompile()
        return program

    def splice(self, graph: Graph, node: Node, form=None) -> bool:
        """Replace ``node`` by its trace through the table, whatever its op, or by the trace of
        ``form`` (a function of the node's arguments written in ATen ops; a
        CompositeImplicitAutograd op is expanded by the dispatcher before any table entry is
        read); False if it cannot be (the node is left as it is)."""
        return self._splice(graph, node, form)

    def _trace(self, node: Node, form=None) -> Optional[Tuple[GraphModule, List[Node]]]:
        leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
        inputs = [leaf for leaf in leaves if isinstance(leaf, Node)]
        vals = [n.meta.get("val") for n in inputs]
        # Shapes are static here (``_propagate_values`` checked the placeholders).
        if not inputs or not all(isinstance(v, torch.Tensor) for v in vals):
            return None
        rank_only = node.target in RANK_ONLY_OPS

        def input_key(v: torch.Tensor) -> tuple:
            return (v.dim(), v.dtype) if rank_only else (v.shape, v.stride(), v.dtype)

        target = node.target if form is None else form
        key = (
            target,
            str(spec),
            tuple(
                ("in", *input_key(leaf.meta["val"]))
                if isinstance(leaf, Node)
                else ("const", repr(leaf))
                for leaf in leaves
            ),
        )
        if key not in self._traces:
            self._traces[key] = self._make_trace(target, leaves, spec, vals)
        traced = self._traces[key]
        return None if traced is None else (traced, inputs)

    def _make_trace(self, target, leaves, spec, vals) -> Optional[GraphModule]:
        def call(*tensors):
            it = iter(tensors)
            filled = [next(it) if isinstance(leaf, Node) else leaf for leaf in leaves]
            args, kwargs = pytree.tree_unflatten(filled, spec)
            return target(*args, **kwargs)

        try:
            traced = make_fx(call, decomposition_table=self.table)(*vals)
        except Exception:  # an op the table cannot trace alone: executorch's retrace handles it
            return None
        for n in traced.graph.nodes:
            if n.op in ("placeholder", "output"):
                continue
            if n.op != "call_function":
                return None
            if n.target is operator.getitem:
                continue
            if not isinstance(n.target, torch._ops.OpOverload) or n.target._schema.is_mutable:
                return None
        return traced

    def _splice(self, graph: Graph, node: Node, form=None) -> bool:
        found = self._trace(node, form)
        if found is None:
            return False
        traced, inputs = found
        out = traced.graph.output_node().args[0]
        users = list(node.users)
        if isinstance(out, (tuple, list)):
            # A multi-output op: every user must pick one output by index.
            if not all(u.target is operator.getitem and isinstance(u.args[1], int) for u in users):
                return False
        elif not isinstance(out, Node):
            return False
        elif out.op == "placeholder" and any(u.op == "output" for u in users):
            return False  # an identity would make a graph output alias an input
        fake_mode = detect_fake_mode([n.meta["val"] for n in inputs])
        env: Dict[Node, Node] = {}
        placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
        env.update(zip(placeholders, inputs))
        live = _live_nodes(traced.graph)
        for sub in traced.graph.nodes:
            if sub.op != "call_function" or sub not in live:
                continue
            with graph.inserting_before(node):
                new = graph.call_function(
                    sub.target,
                    pytree.tree_map_only(Node, env.__getitem__, sub.args),
                    pytree.tree_map_only(Node, env.__getitem__, sub.kwargs),
                )
            new.meta = {k: v for k, v in node.meta.items() if k not in _OWN_META}
            # Its own value, computed on this node's inputs (a cached trace serves many nodes).
            with fake_mode:
                new.meta["val"] = new.target(
                    *pytree.tree_map_only(Node, lambda n: n.meta["val"], new.args),
                    **pytree.tree_map_only(Node, lambda n: n.meta["val"], new.kwargs),
                )
            env[sub] = new
        if isinstance(out, Node):
            node.replace_all_uses_with(env[out])
        else:
            for u in users:
                u.replace_all_uses_with(env[out[u.args[1]]])
                graph.erase_node(u)
        graph.erase_node(node)
        return True


def functional_activations(program: ExportedProgram) -> int:
    """Write an in-place op whose input nothing else reads (``nn.SiLU(inplace=True)`` after a
    conv) as its functional overload, as functionalization would: ``silu_(x)`` -> ``silu(x)``.

    Done before the partitioner asks which ops it keeps whole, so that answer is the one
    executorch gets after functionalizing (which would see ``silu``, not ``silu_``). Only an op
    that writes its first argument alone and returns it, on an input computed by a non-aliasing
    op, with a functional overload of the same arguments. Returns how many it rewrote."""
    graph = program.graph_module.graph
    rewritten = 0
    for node in graph.nodes:
        functional = _functional_overload(node)
        if functional is None:
            continue
        x = node.args[0]
        if not isinstance(x, Node) or x.op != "call_function" or len(x.users) != 1:
            continue
        if not isinstance(x.target, torch._ops.OpOverload) or any(
            r.alias_info is not None for r in x.target._schema.returns
        ):
            continue
        node.target = functional
        rewritten += 1
    if rewritten:
        program.graph_module.recompile()
    return rewritten


def _functional_overload(node: Node) -> Optional[torch._ops.OpOverload]:
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    name = schema.name.split("::")[-1]
    if not name.endswith("_") or name.endswith("__") or len(schema.returns) != 1:
        return None
    writes = [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments]
    if not writes or not writes[0] or any(writes[1:]):
        return None
    packet = getattr(getattr(torch.ops, op.namespace), name[:-1], None)
    functional = getattr(packet, op._overloadname, None)
    if functional is None or functional._schema.is_mutable:
        return None
    args = [(a.name, str(a.type)) for a in schema.arguments]
    if [(a.name, str(a.type)) for a in functional._schema.arguments] != args:
        return None
    return functional


def _propagate_values(program: ExportedProgram) -> bool:
    """Recompute every node's fake value from the placeholders' (what a retrace would see).
    False if that is not possible here (symbolic shapes, an op without a fake kernel): then
    nothing is spliced and executorch's retrace decomposes as usual."""
    placeholders = [n for n in program.graph_module.graph.nodes if n.op == "placeholder"]
    vals = [n.meta.get("val") for n in placeholders]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    if len(tensors) != len(vals) or any(
        not isinstance(d, int) for v in tensors for d in (*v.shape, *v.stride())
    ):
        return False
    try:
        FakeTensorProp(
            program.graph_module, detect_fake_mode(tensors)
        ).propagate_dont_convert_inputs(*vals)
    except Exception:  # the retrace will raise it again, where users expect it, or handle it
        return False
    return True


def _live_nodes(graph: Graph) -> Collection[Node]:
    live = set()
    stack = [graph.output_node()]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live
