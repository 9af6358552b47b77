# SPDX-License-Identifier: BSD-3-Clause
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
from typing import List, Optional

import torch
from torch.export import ExportedProgram
from torch.fx import Node

# qparams() accepts int8/int16 only: uint8 may exist only at the program's IO, never inside.
from ethosu_ng.ops import (
    ATEN_DATA_MOVEMENT_LIST_INPUT,
    ATEN_DATA_MOVEMENT_MULTI_OUTPUT,
    ATEN_DATA_MOVEMENT_OPS,
    ATEN_DATA_MOVEMENT_SINGLE_OUTPUT,
    DEQUANTIZE_PER_TENSOR,
    QUANTIZE_PER_TENSOR,
)
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.qdq_nodes import QParams, as_dtype, qparams, rename_outputs, retype


def _tensor_inputs(node: Node) -> Optional[List[Node]]:
    if node.target in ATEN_DATA_MOVEMENT_LIST_INPUT:
        items = node.args[0]
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, Node) for i in items):
            return None
        return list(items)
    return [node.args[0]] if isinstance(node.args[0], Node) else None


def _outputs(node: Node) -> Optional[List[Node]]:
    """The value-carrying nodes of a pass-through: itself, or its getitems for split-like ops."""
    if node.target not in ATEN_DATA_MOVEMENT_MULTI_OUTPUT:
        return [node]
    users = list(node.users)
    if not all(u.op == "call_function" and u.target == operator.getitem for u in users):
        return None
    return users


class CommuteQDQThroughPassThroughPass(ProgramPass):
    """See module docstring. ``__call__`` mutates the program in place and returns it."""

    # Needs the final qparams and the final data-movement ops.
    modifies = frozenset({Aspect.QDQ_PLACEMENT})
    requires = frozenset({Aspect.DATA_MOVEMENT, Aspect.QPARAMS, Aspect.CONSTANTS})

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
                if node.op != "call_function" or node.target not in ATEN_DATA_MOVEMENT_OPS:
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
        qps = {qparams(i) if i.target == DEQUANTIZE_PER_TENSOR else None for i in inputs}
        if len(qps) != 1 or None in qps:
            return False
        qp = qps.pop()
        outputs = _outputs(node)
        if outputs is None:
            return False
        if node.target in ATEN_DATA_MOVEMENT_LIST_INPUT:
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
            if (
                user.op == "call_function"
                and user.target == QUANTIZE_PER_TENSOR
                and qparams(user) == qp
            ):
                user.replace_all_uses_with(out)
                graph.erase_node(user)
                continue
            # One DQ per consumer so a partition edge never needs a DQ shared across it.
            with graph.inserting_after(out):
                dq = graph.call_function(DEQUANTIZE_PER_TENSOR, (out, *qp))
            dq.meta = {k: v for k, v in out.meta.items() if k not in ("val", "tensor_meta")}
            dq.meta["val"] = as_dtype(out.meta["val"], torch.float32)
            user.replace_input_with(out, dq)

    # x[float] -> P -> Q  ==>  Q(x) -> P
    def _commute_quantize(self, graph, node: Node) -> bool:
        if node.target not in ATEN_DATA_MOVEMENT_SINGLE_OUTPUT:
            return False
        src = node.args[0]
        if not isinstance(src, Node) or src.target == DEQUANTIZE_PER_TENSOR:
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
            q = graph.call_function(QUANTIZE_PER_TENSOR, (src, *qp))
        q.meta = {k: v for k, v in users[0].meta.items() if k not in ("val", "tensor_meta")}
        q.meta["val"] = as_dtype(val, qp[4])
        node.update_arg(0, q)
        retype(node, qp[4])
        for u in users:
            u.replace_all_uses_with(node)
            graph.erase_node(u)
        return True
