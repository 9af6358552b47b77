"""Operator names as users write them (``"aten.bmm.default"``) and as graphs hold them."""

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
