# SPDX-License-Identifier: BSD-3-Clause
"""The one place ethosu_ng touches executorch's exir internals.

``to_backend`` carves each tagged partition into its own program before it calls ``preprocess``;
the partitioner must carve identically to compile a partition ahead of time (and to fall back to
the CPU when Vela fails). The ``.pte`` reader and the partition reporter's per-node reasons are
private too. Each function here names the private symbol it wraps; an executorch upgrade that
moves one fails here, loudly, not somewhere that would swallow it. Pinned against 1.5.1.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch
from executorch.exir.backend.utils import WhyNoPartitionReporter
from torch.export import ExportedProgram

from ethosu_ng.adapters.signature_lookups import memoized_signature_lookups

__all__ = [
    "has_out_variant",
    "WhyNoPartitionReporter",
    "carve_partition",
    "decomposed_by_edge_generation",
    "decomposition_table",
    "duplicate_shared_constants",
    "keepable_ops",
    "pte_delegate_payloads",
    "pte_execution_plan",
    "pte_input_dim_orders",
    "rejected_reasons",
]


def rejected_reasons(reporter: WhyNoPartitionReporter) -> Dict[torch.fx.Node, str]:
    """Node -> the reason upstream's operator support rejected it (``_rejected_nodes``)."""
    reasons = reporter._rejected_nodes
    if not isinstance(reasons, dict):
        raise TypeError(
            f"WhyNoPartitionReporter._rejected_nodes is {type(reasons).__name__}, not a dict: "
            "executorch changed; update ethosu_ng/adapters/exir.py"
        )
    return reasons


def decomposition_table() -> Dict[torch._ops.OpOverload, Callable]:
    """A fresh copy of the table ``to_edge_transform_and_lower`` decomposes with before it takes
    out the ops a partitioner keeps (``_default_decomposition_table``)."""
    from executorch.exir.program._program import _default_decomposition_table

    # torch's table is lazy: every membership test would collect all CIA ops again (~0.06 s).
    return dict(_default_decomposition_table().items())


def decomposed_by_edge_generation(op, table: Dict[torch._ops.OpOverload, Callable]) -> bool:
    """Whether edge generation rewrites ``op``: its first ``run_decompositions({})`` expands every
    CompositeImplicitAutograd op torch.export does not preserve (``reshape`` -> ``view`` or
    ``clone`` + ``_unsafe_view``; torch's private ``_is_cia_op`` / ``_is_preservable_cia_op``),
    and its second the ops of ``table``."""
    from torch._export.utils import _is_cia_op, _is_preservable_cia_op

    if op in table:
        return True
    return (
        isinstance(op, torch._ops.OpOverload) and _is_cia_op(op) and not _is_preservable_cia_op(op)
    )


def has_out_variant(target) -> bool:
    """Whether ``to_executorch()`` can write a CPU node of this edge op (its out variant, which
    the portable kernels implement). Targets other than edge ops are not asked about."""
    to_out = getattr(target, "to_out_variant", None)
    if to_out is None:
        return True
    try:
        to_out()
    except RuntimeError:
        return False
    return True


def keepable_ops(ops: List[torch._ops.OpOverload]) -> List[torch._ops.OpOverload]:
    """``ops`` without those executorch refuses to keep from decomposition (it applies this on the
    path with a per-node filter only)."""
    from executorch.exir.program._program import _remove_invalid_ops_for_not_decompose

    return _remove_invalid_ops_for_not_decompose(list(ops))


def _deserialize(pte: bytes):
    from executorch.exir._serialize._program import deserialize_pte_binary

    parsed = deserialize_pte_binary(bytes(pte))
    return getattr(parsed, "program", parsed)


def pte_delegate_payloads(pte: bytes) -> List[Tuple[str, bytes]]:
    """[(backend_id, processed bytes)] of every delegate in a serialized .pte, in plan order."""
    program = _deserialize(pte)
    out = []
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.processed.location != 0:  # 0 = inline in backend_delegate_data
                raise ValueError(
                    f"delegate {d.id}: processed data stored out of line is not supported"
                )
            out.append((d.id, bytes(program.backend_delegate_data[d.processed.index].data)))
    return out


def pte_execution_plan(pte: bytes, method: str = "forward"):
    """The serialized execution plan of ``method`` (its values, inputs, planned buffer sizes)."""
    program = _deserialize(pte)
    plans = [p for p in program.execution_plan if p.name == method]
    if not plans:
        names = [p.name for p in program.execution_plan]
        raise ValueError(f"the program has no method {method!r} (it has {names})")
    return plans[0]


def pte_operators(pte: bytes) -> List[str]:
    """``ns::op.overload`` of every operator the program's methods call on the CPU."""
    names = set()
    for plan in _deserialize(pte).execution_plan:
        for op in plan.operators:
            names.add(f"{op.name}.{op.overload}" if op.overload else op.name)
    return sorted(names)


def registered_kernels() -> frozenset:
    """The kernels the host runtime has: ExecuTorch's portable library and its quantized kernels
    (the executorch wheel's pybindings register both)."""
    import executorch.kernels.quantized  # noqa: F401 - registers quantized_decomposed kernels
    from executorch.extension.pybindings.portable_lib import _get_operator_names

    return frozenset(_get_operator_names())


def pte_input_dim_orders(pte: bytes, method: str = "forward") -> List[Optional[tuple]]:
    """Dim order of each input of ``method`` as planned in the .pte (None: not a tensor)."""
    plan = pte_execution_plan(pte, method)
    orders = []
    for idx in plan.inputs:
        val = plan.values[idx].val
        orders.append(tuple(val.dim_order) if hasattr(val, "dim_order") else None)
    return orders


def carve_partition(graph_module: torch.fx.GraphModule, owning_program: ExportedProgram, tag: str):
    """Cut the nodes tagged ``tag`` out of ``graph_module`` exactly as ``to_backend`` does before
    calling ``preprocess``: (submodule program, call_module node). Edits ``graph_module``."""
    from executorch.exir.backend.backend_api import _get_node_list_with_same_tag
    from executorch.exir.lowered_backend_module import (
        create_exported_program_from_submodule,
        create_submodule_from_nodes,
    )

    # It asks the signature's buffer and parameter maps once per node.
    with memoized_signature_lookups():
        nodes = _get_node_list_with_same_tag(graph_module, tag, owning_program)
    with graph_module._set_replace_hook(owning_program.graph_signature.get_replace_hook()):
        submodule, call_node = create_submodule_from_nodes(graph_module, nodes, tag)
    program, _, _ = create_exported_program_from_submodule(
        submodule, owning_program, tag, call_node, False
    )
    return program


def duplicate_shared_constants(program: ExportedProgram, tag: str) -> None:
    """``to_backend``'s own step before carving: constants shared across partitions are copied."""
    from executorch.exir.backend.utils import _maybe_duplicate_constant_nodes

    _maybe_duplicate_constant_nodes(program, tag)


def edge_op(op: torch._ops.OpOverload):
    """The edge-dialect op of ATen ``op`` (``aten.view_copy.default`` -> its EdgeOpOverload)."""
    from executorch.exir.dialects._ops import ops as exir_ops

    return getattr(getattr(exir_ops.edge.aten, op._overloadpacket.__name__), op._overloadname)
