# SPDX-License-Identifier: BSD-3-Clause
"""Building blocks every pass uses: the per-tensor quantize/dequantize ops, their qparams, fake
tensor re-typing, inserting an exact ``Q -> DQ`` pair, and keeping output names in the signature."""

from __future__ import annotations

import operator
from typing import Optional, Sequence, Set, Tuple

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import (
    ATEN_DATA_MOVEMENT_LIST_INPUT,
    ATEN_DATA_MOVEMENT_MULTI_OUTPUT,
    ATEN_DATA_MOVEMENT_SINGLE_OUTPUT,
    DEQUANTIZE_PER_TENSOR,
    QUANTIZE_PER_TENSOR,
)

# (scale, zero_point, qmin, qmax, dtype)
QParams = Tuple[float, int, int, int, torch.dtype]

_INTEGER_DTYPES = (torch.int8, torch.int16)


def qparams(node: Node, dtypes=_INTEGER_DTYPES) -> Optional[QParams]:
    """QParams of a per-tensor Q/DQ with literal arguments (and one of ``dtypes``), else None."""
    if node.op != "call_function" or node.target not in (
        QUANTIZE_PER_TENSOR,
        DEQUANTIZE_PER_TENSOR,
    ):
        return None
    if len(node.args) < 6 or node.kwargs:
        return None
    scale, zp, qmin, qmax, dtype = node.args[1:6]
    if not isinstance(scale, float) or not isinstance(zp, int) or dtype not in dtypes:
        return None
    return (scale, zp, qmin, qmax, dtype)


def as_dtype(val, dtype: torch.dtype):
    """The same fake tensor (shape and strides) with another dtype; lists element-wise."""
    if isinstance(val, (list, tuple)):
        return type(val)(as_dtype(v, dtype) for v in val)
    if not isinstance(val, torch.Tensor):
        return val
    mode = getattr(val, "fake_mode", None)
    if mode is None:
        return torch.empty_strided(val.shape, val.stride(), dtype=dtype, device=val.device)
    with mode:
        return torch.empty_strided(val.shape, val.stride(), dtype=dtype, device=val.device)


def retype(node: Node, dtype: torch.dtype) -> None:
    node.meta["val"] = as_dtype(node.meta["val"], dtype)
    node.meta.pop("tensor_meta", None)


def insert_qdq(graph, src: Node, qp: QParams, meta_from: Node, before: Optional[Node] = None):
    """Insert ``src -> Q(qp) -> DQ(qp)`` (after ``src``, or before ``before``); return (Q, DQ)."""
    ctx = graph.inserting_before(before) if before is not None else graph.inserting_after(src)
    with ctx:
        q = graph.call_function(QUANTIZE_PER_TENSOR, (src, *qp))
    with graph.inserting_after(q):
        dq = graph.call_function(DEQUANTIZE_PER_TENSOR, (q, *qp))
    base = {k: v for k, v in meta_from.meta.items() if k not in ("val", "tensor_meta")}
    q.meta = dict(base, val=as_dtype(src.meta["val"], qp[4]))
    dq.meta = dict(base, val=as_dtype(src.meta["val"], torch.float32))
    return q, dq


def rename_outputs(program: ExportedProgram, before: Sequence[Optional[str]], after) -> None:
    """Keep the graph signature's output names in step with the rewritten output node."""
    from torch.export.graph_signature import TensorArgument

    for spec, old, new in zip(program.graph_signature.output_specs, before, after):
        if isinstance(new, Node) and old != new.name and isinstance(spec.arg, TensorArgument):
            spec.arg = TensorArgument(name=new.name)


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
            if u.op == "call_function" and u.target == QUANTIZE_PER_TENSOR:
                found.add(qparams(u))
            elif u.op == "call_function" and (
                u.target in ATEN_DATA_MOVEMENT_SINGLE_OUTPUT
                or u.target in ATEN_DATA_MOVEMENT_LIST_INPUT
            ):
                todo.append(u)  # a cat's quantize applies to each of its inputs' elements
            elif u.op == "call_function" and u.target in ATEN_DATA_MOVEMENT_MULTI_OUTPUT:
                for g in u.users:
                    if g.op == "call_function" and g.target == operator.getitem:
                        todo.append(g)
                    else:
                        found.add(None)
            else:
                found.add(None)
    return found
