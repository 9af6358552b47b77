# SPDX-License-Identifier: BSD-3-Clause
"""Declared IO of one partition: the TensorSpec of each delegate input and output.

Read from the partition's own placeholders and output node, which are the very nodes whose
``meta["val"]`` executorch copies to the parent's ``executorch_call_delegate``; so what we declare
here is what the parent program will allocate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import (
    DATA_MOVEMENT_OPS,
    DEQUANTIZE_PER_TENSOR_OPS,
    QUANTIZE_PER_TENSOR_OPS,
    op_name,
)
from ethosu_ng.partitioning.boundary import BoundaryContractError
from ethosu_ng.tensor_spec import BOUNDARY_DTYPES, TensorSpec


@dataclass
class DelegateIOSpec:
    """Typed IO of one delegate, in delegate argument order (what ``_delegate_info_meta`` holds)."""

    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    input_names: List[str] = field(default_factory=list)
    output_names: List[str] = field(default_factory=list)
    vela_summary: Dict[str, str] = field(default_factory=dict)
    # Vela's layers attributed to modules (module_profile.attribute), for the per-module profile.
    layers: List[Dict] = field(default_factory=list)
    # Each copy Vela runs as a layer of its own: pattern and why it remains
    # (tosa_optimize/copy_report.py); None for a graph it does not analyse.
    copies: Optional[List[Dict]] = None
    # compiler.verify_npu's verdict on the command stream (None: verification off).
    npu_verification: Optional[object] = None
    # compiler.verify_lowering's verdict on the TOSA graph (None: verification off).
    lowering_verification: Optional[object] = None


def _qparams_of(node: Node) -> Optional[Tuple[float, int]]:
    return float(node.args[1]), int(node.args[2])


def _upstream_qparams(node: Node) -> Optional[Tuple[float, int]]:
    """Walk back through pass-through ops to the quantize that produced this integer tensor."""
    seen = 0
    while seen < 10_000:
        seen += 1
        name = op_name(node.target) if node.op == "call_function" else node.op
        if name in QUANTIZE_PER_TENSOR_OPS:
            return _qparams_of(node)
        if (
            name in DATA_MOVEMENT_OPS
            and node.args
            and isinstance(node.args[0], (Node, list, tuple))
        ):
            src = node.args[0]
            node = src[0] if isinstance(src, (list, tuple)) else src
            if not isinstance(node, Node):
                return None
            continue
        if node.op == "placeholder":
            return _downstream_qparams(node)
        return None
    return None


def _downstream_qparams(node: Node) -> Optional[Tuple[float, int]]:
    """The dequantize that reads this integer tensor (directly or through pass-through ops)."""
    frontier, found = [node], set()
    visited = set()
    while frontier:
        n = frontier.pop()
        if n in visited:
            continue
        visited.add(n)
        for u in n.users:
            if u.op != "call_function":
                continue
            name = op_name(u.target)
            if name in DEQUANTIZE_PER_TENSOR_OPS:
                found.add(_qparams_of(u))
            elif name in DATA_MOVEMENT_OPS:
                frontier.append(u)
    return found.pop() if len(found) == 1 else None


QPARAMS_META = "ethosu_ng_qparams"


def integer_tensor_qparams(node: Node) -> Optional[Tuple[float, int]]:
    """Per-tensor (scale, zero point) of an integer tensor: from the quantize that produced it,
    else from the dequantize(s) that read it. The partitioner stores this in ``meta`` while it
    still sees the whole graph, because inside a partition the producing quantize may be on CPU."""
    if QPARAMS_META in node.meta:
        return node.meta[QPARAMS_META]
    return _upstream_qparams(node) or _downstream_qparams(node)


def _spec(node: Node, what: str, qp: Optional[Tuple[float, int]]) -> TensorSpec:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise BoundaryContractError(f"{what} ({node.name}) is not a tensor: {type(val).__name__}")
    if val.dtype not in BOUNDARY_DTYPES:
        raise BoundaryContractError(
            f"{what} ({node.name}) is {val.dtype}; a delegate boundary tensor must be one of "
            f"{sorted(str(d) for d in BOUNDARY_DTYPES)}"
        )
    try:
        dim_order = tuple(val.dim_order())
    except Exception:  # non-dense strides: fall back to contiguous
        dim_order = tuple(range(val.dim()))
    scale, zp = qp if qp is not None else (None, None)
    return TensorSpec(val.dtype, tuple(val.shape), dim_order, scale, zp)


def declared_io(program: ExportedProgram) -> DelegateIOSpec:
    graph = program.graph_module.graph
    user_inputs = set(program.graph_signature.user_inputs)
    placeholders = [n for n in graph.nodes if n.op == "placeholder" and n.name in user_inputs]
    outputs = [a for a in graph.output_node().args[0]]
    ins = [_spec(n, f"input {k}", integer_tensor_qparams(n)) for k, n in enumerate(placeholders)]
    outs = []
    for k, n in enumerate(outputs):
        if not isinstance(n, Node):
            raise BoundaryContractError(f"output {k} is a constant {n!r}, not a tensor")
        outs.append(_spec(n, f"output {k}", integer_tensor_qparams(n)))
    return DelegateIOSpec(ins, outs, [n.name for n in placeholders], [n.name for n in outputs])
