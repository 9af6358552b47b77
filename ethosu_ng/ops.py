# SPDX-License-Identifier: BSD-3-Clause
"""The op vocabulary: how ops are named, and which ops quantize, dequantize, move data or compute
nothing. Every other module asks here; none keeps its own list.

Sets of *names* (``op_name``) hold for both dialects a graph passes through (ATen
``OpOverload`` and edge ``EdgeOpOverload`` print the same name), so one set serves the passes that
run before decomposition and the partitioner that runs after it. Where a set is ATen-only (the
pre-decomposition data-movement ops, whose edge forms are the ``*_copy`` variants) its name says
so.
"""

from __future__ import annotations

from typing import Iterable, Set

import torch


def _unwrap(target):
    """The ATen OpOverload behind an edge op (EdgeOpOverload keeps it in ``_op``)."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    inner = getattr(target, "_op", None)
    return inner if isinstance(inner, torch._ops.OpOverload) else target


def op_name(target) -> str:
    """``aten.bmm.default`` for an ATen OpOverload, an edge op, or a string naming one."""
    op = _unwrap(target)
    if isinstance(op, torch._ops.OpOverload):
        return str(op)
    return getattr(target, "__name__", str(target))


def resolve_op_names(ops: Iterable) -> Set[str]:
    """Validate a user's op list; each entry an op overload or its dotted name."""
    if isinstance(ops, (str, bytes)) or not hasattr(ops, "__iter__"):
        raise TypeError(f"cpu_ops must be a list of ops or op names, got {type(ops).__name__}")
    names: Set[str] = set()
    for k, entry in enumerate(ops):
        if isinstance(entry, str):
            parts = entry.split(".")
            if len(parts) != 3:
                raise ValueError(
                    f"cpu_ops[{k}] = {entry!r} is not an op name like 'aten.bmm.default'"
                )
            ns, name, overload = parts
            try:
                packet = getattr(getattr(torch.ops, ns), name)
                op = getattr(packet, overload)
            except (AttributeError, RuntimeError):
                raise ValueError(f"cpu_ops[{k}] = {entry!r} names no registered operator") from None
            names.add(str(op))
        else:
            op = _unwrap(entry)
            if not isinstance(op, torch._ops.OpOverload):
                raise ValueError(
                    f"cpu_ops[{k}] = {entry!r} is not an operator overload "
                    f"(use e.g. torch.ops.aten.bmm.default or 'aten.bmm.default')"
                )
            names.add(str(op))
    return names


# Node meta "custom" key marking, before decomposition, a node of an op in ``cpu_ops`` (its value:
# the op's name). The ops it decomposes into inherit node meta "custom", so they stay pinned too.
CPU_PINNED_META = "ethosu_ng_cpu_pinned"


def node_op_name(node) -> str:
    """``op_name`` of a call_function node, ``""`` for every other node."""
    return op_name(node.target) if node.op == "call_function" else ""


# ---------------------------------------------------------------- quantize / dequantize
# The module defining the quantized_decomposed library: the names below exist once it ran.
import torch.ao.quantization.fx._decomposed  # noqa: E402, F401

qd = torch.ops.quantized_decomposed
QUANTIZE_PER_TENSOR = qd.quantize_per_tensor.default
DEQUANTIZE_PER_TENSOR = qd.dequantize_per_tensor.default
QUANTIZE_PER_CHANNEL = qd.quantize_per_channel.default
DEQUANTIZE_PER_CHANNEL = qd.dequantize_per_channel.default

QUANTIZE_PER_TENSOR_OPS = frozenset(
    {
        "quantized_decomposed.quantize_per_tensor.default",
        "quantized_decomposed.quantize_per_tensor.tensor",
    }
)
DEQUANTIZE_PER_TENSOR_OPS = frozenset(
    {
        "quantized_decomposed.dequantize_per_tensor.default",
        "quantized_decomposed.dequantize_per_tensor.tensor",
    }
)
QUANTIZE_OPS = QUANTIZE_PER_TENSOR_OPS | {"quantized_decomposed.quantize_per_channel.default"}
DEQUANTIZE_OPS = DEQUANTIZE_PER_TENSOR_OPS | {"quantized_decomposed.dequantize_per_channel.default"}
QDQ_OPS = QUANTIZE_OPS | DEQUANTIZE_OPS


def is_quantize(node) -> bool:
    return node_op_name(node) in QUANTIZE_OPS


def is_dequantize(node) -> bool:
    return node_op_name(node) in DEQUANTIZE_OPS


def is_per_tensor_quantize(node) -> bool:
    return node_op_name(node) == "quantized_decomposed.quantize_per_tensor.default"


def is_per_tensor_dequantize(node) -> bool:
    return node_op_name(node) == "quantized_decomposed.dequantize_per_tensor.default"


# ---------------------------------------------------------------- control flow
# Operators that call graphs (their get_attr arguments); delegated whole where the target's TOSA
# profile has control flow (partitioning/control_flow.py).
CONTROL_FLOW_OPS = (torch.ops.higher_order.cond, torch.ops.higher_order.while_loop)


def has_control_flow(gm: torch.fx.GraphModule) -> bool:
    return any(n.op == "call_function" and n.target in CONTROL_FLOW_OPS for n in gm.graph.nodes)


def has_while_loop(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` or a graph its control flow calls (at any depth) holds a while_loop."""
    return any(
        n.op == "call_function" and n.target is torch.ops.higher_order.while_loop
        for m in gm.modules()
        if isinstance(m, torch.fx.GraphModule)
        for n in m.graph.nodes
    )


# ---------------------------------------------------------------- the delegate call
CALL_DELEGATE = torch.ops.higher_order.executorch_call_delegate


def is_call_delegate(node) -> bool:
    return node.op == "call_function" and node.target is CALL_DELEGATE


# ---------------------------------------------------------------- data movement (edge dialect)
# Change the view of a tensor, never its bytes in NHWC: lower to nothing (or a trivial copy).
VIEW_OPS = frozenset(
    {
        "aten.view_copy.default",
        "aten.squeeze_copy.dims",
        "aten.squeeze_copy.dim",
        "aten.squeeze_copy.default",
        "aten.unsqueeze_copy.default",
        "aten.clone.default",
        "aten.alias_copy.default",
        "aten.detach_copy.default",
        "dim_order_ops._clone_dim_order.default",
        "dim_order_ops._to_dim_order_copy.default",
    }
)
# Slice a tensor: every output element is one input element.
SLICING_OPS = frozenset({"aten.slice_copy.Tensor", "aten.select_copy.int"})
# Average pools, adaptive ones included (a table op before one is made integer early:
# adapters.arm._tables_before_pooling).
AVG_POOL_OPS = frozenset(
    {
        "aten.avg_pool2d.default",
        "aten.adaptive_avg_pool2d.default",
        "aten._adaptive_avg_pool2d.default",
    }
)
# Constant or mode padding of a tensor's edges.
PAD_OPS = frozenset(
    {
        "aten.constant_pad_nd.default",
        "aten.pad.default",
        "aten.reflection_pad1d.default",
        "aten.reflection_pad2d.default",
        "aten.reflection_pad3d.default",
        "aten.replication_pad1d.default",
        "aten.replication_pad2d.default",
        "aten.replication_pad3d.default",
    }
)
# Arithmetic right shifts: the U55's SHR rounds where PyTorch floors (partitioning/target_limits).
RIGHT_SHIFT_OPS = frozenset(
    {"aten.bitwise_right_shift.Tensor", "aten.bitwise_right_shift.Tensor_Scalar"}
)
# Output values are input values, moved (the NPU spends cycles on these, but changes no value):
# per-tensor qparams flow through them unchanged.
DATA_MOVEMENT_OPS = (
    VIEW_OPS
    | SLICING_OPS
    | frozenset(
        {
            "aten.permute_copy.default",
            "aten.expand_copy.default",
            "aten.repeat.default",
            "aten.cat.default",
            "aten.split_with_sizes_copy.default",
            "aten.split_copy.Tensor",
            "aten.unbind_copy.int",
            "getitem",
        }
    )
)
# A partition made only of these lowers to an empty (or trivial) NPU program: no delegate.
NO_COMPUTE_OPS = VIEW_OPS | QDQ_OPS | frozenset({"aten.expand_copy.default", "getitem"})


def is_compute(name: str) -> bool:
    """Counted as an op in reports: anything but a quantize/dequantize or a getitem."""
    return name not in QDQ_OPS and name != "getitem"


# ---------------------------------------------------------------- data movement (ATen dialect)
# The same concept before decomposition, where the graph holds the view ops, not their copies.
_aten = torch.ops.aten
ATEN_DATA_MOVEMENT_SINGLE_OUTPUT = frozenset(
    {
        _aten.view.default,
        _aten.reshape.default,
        _aten._unsafe_view.default,
        _aten.permute.default,
        _aten.transpose.int,
        _aten.t.default,
        _aten.squeeze.default,
        _aten.squeeze.dim,
        _aten.squeeze.dims,
        _aten.unsqueeze.default,
        _aten.flatten.using_ints,
        _aten.unflatten.int,
        _aten.slice.Tensor,
        _aten.select.int,
        _aten.narrow.default,
        _aten.clone.default,
        _aten.alias.default,
        _aten.detach.default,
        _aten.expand.default,
        _aten.repeat.default,
    }
)
ATEN_DATA_MOVEMENT_MULTI_OUTPUT = frozenset(
    {_aten.split.Tensor, _aten.split_with_sizes.default, _aten.unbind.int, _aten.chunk.default}
)
ATEN_DATA_MOVEMENT_LIST_INPUT = frozenset({_aten.cat.default, _aten.concat.default})
ATEN_DATA_MOVEMENT_OPS = (
    ATEN_DATA_MOVEMENT_SINGLE_OUTPUT
    | ATEN_DATA_MOVEMENT_MULTI_OUTPUT
    | ATEN_DATA_MOVEMENT_LIST_INPUT
)
