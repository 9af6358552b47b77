# SPDX-License-Identifier: BSD-3-Clause
"""Control flow: which ``cond`` / ``while_loop`` graphs may be delegated whole, and what the CPU
cannot run.

ExecuTorch's emitter runs ``cond``, ``map`` and ``scan`` on the CPU but has no ``while_loop``
("Unsupported control flow operator"). On a target whose TOSA profile has the control-flow
extension (Ethos-U85: ``+cf``), upstream's support check delegates a ``cond`` or ``while_loop``
whose called graphs are each tagged whole for the NPU; ``tag_control_flow_graphs`` gives them
those tags. A ``while_loop`` that ends on the CPU anyway can never run: ``reject_cpu_unrunnable``
raises a one-line error naming the node and why, before ``to_executorch``.
"""

from __future__ import annotations

from typing import Dict, Iterator

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node
from torch.fx.passes.operator_support import OperatorSupportBase

from ethosu_ng.adapters import arm as upstream
from ethosu_ng.ops import is_dequantize, is_quantize, op_name

# Higher-order ops ExecuTorch's emitter cannot run on the CPU, with the reason.
CPU_UNRUNNABLE = {
    torch.ops.higher_order.while_loop: "ExecuTorch's emitter has no while_loop for the CPU",
}

# The tag of a control-flow graph's nodes; the graph travels whole with its operator's partition.
GRAPH_TAG_PREFIX = "ethosu_ng_cf"


class UnsupportedControlFlowError(RuntimeError):
    """A control-flow operator that neither the CPU nor the NPU delegate can run."""


def _nodes(gm: GraphModule, prefix: str = "") -> Iterator[tuple]:
    """Every node of ``gm`` and of the graphs its control-flow operators call, with its path."""
    for n in gm.graph.nodes:
        yield prefix + n.name, n
        if n.op == "get_attr":
            sub = getattr(gm, str(n.target), None)
            if isinstance(sub, GraphModule):
                yield from _nodes(sub, f"{prefix}{n.target}.")


def _edge_qdq(n: Node) -> bool:
    """A quantize of a graph input or a dequantize feeding only the output: the operator's
    boundary, which upstream's check does not require tagged."""
    if is_quantize(n) and all(a.op == "placeholder" for a in n.all_input_nodes):
        return True
    return is_dequantize(n) and bool(n.users) and all(u.op == "output" for u in n.users)


def tag_control_flow_graphs(
    program: ExportedProgram, support: OperatorSupportBase, reasons: Dict[str, str]
) -> None:
    """Tag every node of each control-flow graph (innermost first) that ``support`` takes whole;
    a graph with an unsupported node keeps none, and its first such node's reason goes into
    ``reasons`` (keyed by the node's path)."""
    count = 0  # graphs tagged so far: each gets its own tag

    def visit(gm: GraphModule, prefix: str) -> None:
        nonlocal count
        for name, sub, _ in upstream.control_flow_submodules(gm):
            path = f"{prefix}{name}."
            visit(sub, path)
            modules = dict(sub.named_modules())
            calls = [n for n in sub.graph.nodes if n.op == "call_function"]
            blocked = next(
                (
                    n
                    for n in calls
                    if not _edge_qdq(n) and not support.is_node_supported(modules, n)
                ),
                None,
            )
            for n in calls:
                n.meta.pop("delegation_tag", None)
            if blocked is not None:
                reasons.setdefault(
                    path + blocked.name,
                    f"{op_name(blocked.target)} in the graph it calls is not supported on the NPU",
                )
                continue
            for n in calls:
                n.meta["delegation_tag"] = f"{GRAPH_TAG_PREFIX}{count}"
            count += 1

    visit(program.graph_module, "")


def clear_control_flow_tags(program: ExportedProgram) -> None:
    for _, n in _nodes(program.graph_module):
        if str(n.meta.get("delegation_tag", "")).startswith(GRAPH_TAG_PREFIX):
            del n.meta["delegation_tag"]


def _cpu_run(gm: GraphModule, prefix: str, top: bool) -> Iterator[tuple]:
    """(path, node) of every call the CPU will run: the top-level graph's untagged calls, and
    everything in the graphs that a control-flow call on the CPU calls."""
    for n in gm.graph.nodes:
        if n.op != "call_function" or (top and n.meta.get("delegation_tag")):
            continue
        yield prefix + n.name, n
        if isinstance(n.target, torch._ops.HigherOrderOperator):
            for a in n.args:
                if isinstance(a, Node) and a.op == "get_attr":
                    sub = getattr(gm, str(a.target), None)
                    if isinstance(sub, GraphModule):
                        yield from _cpu_run(sub, f"{prefix}{a.target}.", False)


def reject_cpu_unrunnable(program: ExportedProgram, target: str, why: Dict[str, str]) -> None:
    """Raise ``UnsupportedControlFlowError`` for the first ``CPU_UNRUNNABLE`` node the CPU would
    run (``why``: the partitioner's reasons by node name or path)."""
    for path, n in _cpu_run(program.graph_module, "", True):
        if n.target not in CPU_UNRUNNABLE:
            continue
        name = getattr(n.target, "__name__", str(n.target))
        # Why a graph it calls was not taken whole, else its own reason.
        base = path.rsplit(".", 1)[0] + "." if "." in path else ""
        graphs = [
            f"{base}{a.target}." for a in n.args if isinstance(a, Node) and a.op == "get_attr"
        ]
        because = next(
            (r for p, r in why.items() if any(p.startswith(g) for g in graphs)), why.get(path)
        )
        raise UnsupportedControlFlowError(
            f"node {path} ({name}) cannot run: {CPU_UNRUNNABLE[n.target]}, and it is not "
            f"delegated to {target}"
            + (f" ({because})" if because else "")
            + "; unroll the loop in the model"
        )
