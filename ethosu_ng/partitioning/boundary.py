# SPDX-License-Identifier: BSD-3-Clause
"""BoundaryContract: what may cross a delegate boundary, enforced on partition tags.

The contract (see README): every tensor entering or leaving a delegate is an integer tensor
(int8/uint8/int16/uint16/int32, and bool where the target has bool tensors: Ethos-U85);
quantize nodes whose input comes from outside and dequantize nodes that feed outside run on the
CPU; no floating-point tensor ever crosses. ``shrink`` removes nodes from a proposed partition
until that holds; ``verify_tags`` checks a whole tagged program and raises
``BoundaryContractError`` naming the node otherwise.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import is_call_delegate, is_dequantize, is_quantize
from ethosu_ng.tensor_spec import BOUNDARY_DTYPES


class BoundaryContractError(RuntimeError):
    """A tensor crossing a delegate boundary does not have the type the NPU reads or writes."""


def tensor_dtype(node: Node) -> Optional[torch.dtype]:
    val = node.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) else None


def is_float(node: Node) -> bool:
    dt = tensor_dtype(node)
    return dt is not None and (dt.is_floating_point or dt.is_complex)


def crossing_dtypes(bool_crosses: bool) -> frozenset:
    """The dtypes a tensor may cross a delegate boundary with: the integer dtypes, and bool on a
    target whose TOSA profile has BOOL tensors (Ethos-U85; TOSA +u55 has none)."""
    return BOUNDARY_DTYPES if bool_crosses else BOUNDARY_DTYPES - {torch.bool}


def constant_names(program: ExportedProgram) -> Set[str]:
    """Placeholders that become delegate constants instead of runtime inputs."""
    sig = program.graph_signature
    names = set(sig.inputs_to_parameters) | set(sig.inputs_to_lifted_tensor_constants)
    mutated = set(sig.buffers_to_mutate.values())
    names |= {n for n, b in sig.inputs_to_buffers.items() if b not in mutated}
    return names


def _is_constant(node: Node, constants: Set[str]) -> bool:
    return node.op == "get_attr" or (node.op == "placeholder" and node.name in constants)


@dataclass
class PartitionIO:
    inputs: List[Node]  # nodes outside the partition whose values flow in
    outputs: List[Node]  # nodes inside whose values flow out (or are graph outputs)


def partition_io(nodes: Set[Node], constants: Set[str]) -> PartitionIO:
    inputs: Dict[Node, None] = {}
    outputs: Dict[Node, None] = {}
    for n in sorted(nodes, key=node_order):
        for i in n.all_input_nodes:
            if i not in nodes and not _is_constant(i, constants):
                inputs[i] = None
        if any(u not in nodes for u in n.users):
            outputs[n] = None
    return PartitionIO(list(inputs), list(outputs))


def node_order(n: Node) -> int:
    """Position of ``n`` in its graph (cached per graph): deterministic orders for reports."""
    graph = n.graph
    if not hasattr(graph, "_ethosu_ng_order"):
        graph._ethosu_ng_order = {m: k for k, m in enumerate(graph.nodes)}
    return graph._ethosu_ng_order.get(n, 0)


def _names(dtypes) -> str:
    return ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))


class BoundaryContract:
    """Shrinks partitions until their boundary is integer-only, then verifies it.

    ``bool_crosses``: bool tensors may cross (the target's TOSA profile is not the +u55 subset)."""

    def __init__(self, program: ExportedProgram, bool_crosses: bool = False):
        self.program = program
        self.constants = constant_names(program)
        self.dtypes = crossing_dtypes(bool_crosses)

    def _may_cross(self, node: Node) -> bool:
        """Whether ``node``'s tensor may cross a boundary of this contract."""
        dt = tensor_dtype(node)
        return dt is None or dt in self.dtypes

    def _why_not(self, dt: Optional[torch.dtype]) -> str:
        if dt == torch.bool:
            return " (the target has no bool tensors)"
        return ""

    def why_excluded(self, n: Node, part: Set[Node]) -> Optional[str]:
        """Reason a node must leave ``part`` for the contract to hold, or None."""
        if is_quantize(n) and n.args[0] not in part and not _is_constant(n.args[0], self.constants):
            return "quantize at a partition entry runs on CPU (boundary tensor must be integer)"
        if is_dequantize(n) and any(u not in part for u in n.users):
            return "dequantize at a partition exit runs on CPU (boundary tensor must be integer)"
        if n.target == operator.getitem and n.args[0] not in part:
            return "getitem of a value computed outside the partition"
        if isinstance(n.meta.get("val"), (list, tuple)) and any(u not in part for u in n.users):
            return "multi-output op whose getitem left the partition"
        for i in n.all_input_nodes:
            if i not in part and not _is_constant(i, self.constants) and not self._may_cross(i):
                dt = tensor_dtype(i)
                return f"input {i.name} is {dt} from outside the partition{self._why_not(dt)}"
        if not self._may_cross(n) and any(u not in part for u in n.users):
            dt = tensor_dtype(n)
            return f"output is {dt} and leaves the partition{self._why_not(dt)}"
        return None

    def shrink(self, part: Set[Node]) -> Dict[Node, str]:
        """Remove nodes from ``part`` (in place) until the boundary is integer-only."""
        removed: Dict[Node, str] = {}
        changed = True
        while changed:
            changed = False
            for n in sorted(part, key=node_order):
                reason = self.why_excluded(n, part)
                if reason is not None:
                    part.discard(n)
                    removed[n] = reason
                    changed = True
        return removed

    def check(self, tag: str, part: Set[Node]) -> PartitionIO:
        io = partition_io(part, self.constants)
        for k, i in enumerate(io.inputs):
            dt = tensor_dtype(i)
            if dt not in self.dtypes:
                raise BoundaryContractError(
                    f"{tag}: input {k} ({i.name}) is {dt}, expected one of {_names(self.dtypes)}"
                )
        for k, o in enumerate(io.outputs):
            dt = tensor_dtype(o)
            if dt is None and isinstance(o.meta.get("val"), (list, tuple)):
                raise BoundaryContractError(
                    f"{tag}: multi-output node {o.name} leaves the partition whole"
                )
            if dt not in self.dtypes:
                raise BoundaryContractError(
                    f"{tag}: output {k} ({o.name}) is {dt}, expected one of {_names(self.dtypes)}"
                )
        return io

    def verify_tags(self) -> Dict[str, PartitionIO]:
        """Check every tagged partition of the program; raise BoundaryContractError on a
        violation."""
        parts: Dict[str, Set[Node]] = {}
        for n in self.program.graph_module.graph.nodes:
            tag = n.meta.get("delegation_tag")
            if tag and n.op == "call_function":
                parts.setdefault(tag, set()).add(n)
        return {tag: self.check(tag, p) for tag, p in parts.items()}


def float_boundary_tensors(program: ExportedProgram) -> List[str]:
    """Names of float tensors entering or leaving any delegate call of a lowered program."""
    bad: List[str] = []
    for n in program.graph_module.graph.nodes:
        if not is_call_delegate(n):
            continue
        for k, a in enumerate(n.args[1:]):
            if isinstance(a, Node) and is_float(a):
                bad.append(f"{n.name} input {k} ({a.name}: {tensor_dtype(a)})")
        vals = n.meta.get("val")
        vals = vals if isinstance(vals, (list, tuple)) else [vals]
        for k, v in enumerate(vals):
            if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
                bad.append(f"{n.name} output {k} ({v.dtype})")
    return bad
