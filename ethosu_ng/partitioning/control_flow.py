# SPDX-License-Identifier: BSD-3-Clause
"""Control flow the CPU cannot run: refused when partitioning starts, not deep in to_executorch.

ExecuTorch's emitter runs ``cond``, ``map`` and ``scan`` on the CPU but has no ``while_loop``
("Unsupported control flow operator"). ethosu_ng delegates no control-flow operator (a
``cond`` runs on the CPU, its branches' ops delegated where they qualify), so a ``while_loop``
anywhere in the program can never run: the export fails here with a one-line error naming the
node and why, before any partition is compiled.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule

# Higher-order ops ExecuTorch's emitter cannot run on the CPU, with the reason.
CPU_UNRUNNABLE = {
    torch.ops.higher_order.while_loop: "ExecuTorch's emitter has no while_loop for the CPU",
}


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


def reject_cpu_unrunnable_control_flow(program: ExportedProgram, target: str) -> None:
    """Raise ``UnsupportedControlFlowError`` for the first ``CPU_UNRUNNABLE`` node."""
    for path, n in _nodes(program.graph_module):
        if n.op == "call_function" and n.target in CPU_UNRUNNABLE:
            name = getattr(n.target, "__name__", str(n.target))
            raise UnsupportedControlFlowError(
                f"node {path} ({name}) cannot run: {CPU_UNRUNNABLE[n.target]}, and ethosu_ng "
                f"does not delegate control flow to {target}; unroll the loop in the model"
            )
