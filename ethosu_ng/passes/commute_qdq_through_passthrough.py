"""Move dequantize after, and quantize before, pure data-movement ops.

Keeps boundary-contract rule 3 (no float tensor crosses a delegate boundary) without pushing work
to the CPU. A quantized graph from PT2E looks like ``Q -> DQ -> view -> Q -> DQ -> ...``. If a
partition ends right after ``view``, the exit is float while the NPU writes int8 (seed 000).
Pass-through ops (view, permute, slice, split, cat of equal qparams, ...) commute exactly with
per-tensor (de)quantization, so we rewrite

    DQ(x) -> P -> Q(same qparams)   into   P(x) [int8]
    DQ(x) -> P -> float consumer    into   P(x) [int8] -> DQ -> float consumer
    x [float] -> P -> Q             into   Q(x) -> P [int8]

and the pass-through runs in int8 on the NPU, the (de)quantize sits on the boundary's CPU side.
Runs on the ATen-dialect program before decomposition (the only point where a partitioner may
change the graph, via ``transform_for_pre_decomposition``).
"""

from __future__ import annotations

import operator
from typing import List, Optional, Set

import torch
from torch.export import ExportedProgram
from torch.fx import Node

# qparams() accepts int8/int16 only: uint8 may exist only at the program's IO, never inside.
from .qdq_nodes import (
    DQ_PER_TENSOR,
    Q_PER_TENSOR,
    QParams,
    as_dtype,
    qparams,
    rename_outputs,
    retype,
)

aten = torch.ops.aten

SINGLE_OUTPUT_PASS_THROUGH = frozenset(
    {
        aten.view.default,
        aten.reshape.default,
        aten._unsafe_view.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.unsqueeze.default,
        aten.flatten.using_ints,
        aten.unflatten.int,
        aten.slice.Tensor,
        aten.select.int,
        aten.narrow.default,
        aten.clone.default,
        aten.alias.default,
        aten.detach.default,
        aten.expand.default,
        aten.repeat.default,
    }
)
MULTI_OUTPUT_PASS_THROUGH = frozenset(
    {
        aten.split.Tensor,
        aten.split_with_sizes.default,
        aten.unbind.int,
        aten.chunk.default,
    }
)
LIST_INPUT_PASS_THROUGH = frozenset({aten.cat.default, aten.concat.default})
PASS_THROUGH_OPS = SINGLE_OUTPUT_PASS_THROUGH | MULTI_OUTPUT_PASS_THROUGH | LIST_INPUT_PASS_THROUGH


def quantize_qparams_downstream(node: Node, skip: Optional[Node] = None) -> Set[Optional[QParams]]:
    """The qparams of the first quantize on every path from ``node``'s users through
    data-movement ops and concatenations (which commute exactly with a per-tensor quantize);
    None for a path that meets anything else. ``skip``: a user not to follow."""
    found: Set[Optional[QParams]] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        for u in n.users:
            if u is skip:
                continue
            if u.op == "call_function" and u.target == Q_PER_TENSOR:
                found.add(qparams(u))
            elif u.op == "call_function" and (
                u.target in SINGLE_OUTPUT_PASS_THROUGH or u.target in LIST_INPUT_PASS_THROUGH
            ):
                todo.append(u)  # a cat's quantize applies to each of its inputs' elements
            elif u.op == "call_function" and u.target in MULTI_OUTPUT_PASS_THROUGH:
                for g in u.users:
                    if g.op == "call_function" and g.target == operator.getitem:
                        todo.append(g)
                    else:
                        found.add(None)
            else:
                found.add(None)
    return found


def _tensor_inputs(node: Node) -> Optional[List[Node]]:
    if node.target in LIST_INPUT_PASS_THROUGH:
        items = node.args[0]
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, Node) for i in items):
            return None
        return list(items)
    return [node.args[0]] if isinstance(node.args[0], Node) else None


def _outputs(node: Node) -> Optional[List[Node]]:
    """The value-carrying nodes of a pass-through: itself, or its getitems for split-like ops."""
    if node.target not in MULTI_OUTPUT_PASS_THROUGH:
        return [node]
    users = list(node.users)
    if not all(u.op == "call_function" and u.target == operator.getitem for u in users):
        return None
    return users


class CommuteQDQThroughPassThroughPass:
    """See module docstring. ``__call__`` mutates the program in place and returns it."""

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        gm = program.graph_module
        graph = gm.graph
        out_node = graph.output_node()
        names_before = [a.name if isinstance(a, Node) else None for a in out_node.args[0]]
        changed = True
        self.rewrites = 0
        while changed:
            changed = False
            for node in list(graph.nodes):
                if node.op != "call_function" or node.target not in PASS_THROUGH_OPS:
                    continue
                if self._commute_dequantize(graph, node) or self._commute_quantize(graph, node):
                    changed = True
                    self.rewrites += 1
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
        rename_outputs(program, names_before, out_node.args[0])
        return program

    # DQ(x) -> P  ==>  P(x) -> DQ
    def _commute_dequantize(self, graph, node: Node) -> bool:
        inputs = _tensor_inputs(node)
        if not inputs:
            return False
        qps = {qparams(i) if i.target == DQ_PER_TENSOR else None for i in inputs}
        if len(qps) != 1 or None in qps:
            return False
        qp = qps.pop()
        outputs = _outputs(node)
        if outputs is None:
            return False
        if node.target in LIST_INPUT_PASS_THROUGH:
            node.update_arg(0, [i.args[0] for i in inputs])
        else:
            node.update_arg(0, inputs[0].args[0])
        dtype = qp[4]
        retype(node, dtype)
        for out in outputs:
            if out is not node:
                retype(out, dtype)
            self._requantize_users(graph, out, qp)
        for i in set(inputs):
            if not i.users:
                graph.erase_node(i)
        return True

    @staticmethod
    def _requantize_users(graph, out: Node, qp: QParams) -> None:
        """Users of an int8 pass-through output: matching Q disappears, others get their own DQ."""
        for user in list(out.users):
            if user.op == "call_function" and user.target == Q_PER_TENSOR and qparams(user) == qp:
                user.replace_all_uses_with(out)
                graph.erase_node(user)
                continue
            # One DQ per consumer so a partition edge never needs a DQ shared across it.
            with graph.inserting_after(out):
                dq = graph.call_function(DQ_PER_TENSOR, (out, *qp))
            dq.meta = {k: v for k, v in out.meta.items() if k not in ("val", "tensor_meta")}
            dq.meta["val"] = as_dtype(out.meta["val"], torch.float32)
            user.replace_input_with(out, dq)

    # x[float] -> P -> Q  ==>  Q(x) -> P
    def _commute_quantize(self, graph, node: Node) -> bool:
        if node.target not in SINGLE_OUTPUT_PASS_THROUGH:
            return False
        src = node.args[0]
        if not isinstance(src, Node) or src.target == DQ_PER_TENSOR:
            return False
        val = src.meta.get("val")
        if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
            return False
        users = list(node.users)
        qps = {qparams(u) for u in users}
        if not users or len(qps) != 1 or None in qps:
            return False
        qp = qps.pop()
        with graph.inserting_before(node):
            q = graph.call_function(Q_PER_TENSOR, (src, *qp))
        q.meta = {k: v for k, v in users[0].meta.items() if k not in ("val", "tensor_meta")}
        q.meta["val"] = as_dtype(val, qp[4])
        node.update_arg(0, q)
        retype(node, qp[4])
        for u in users:
            u.replace_all_uses_with(node)
            graph.erase_node(u)
        return True
