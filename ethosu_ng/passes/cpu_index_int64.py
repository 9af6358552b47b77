# SPDX-License-Identifier: BSD-3-Clause
"""Int64 indices for the index ops the CPU runs.

Upstream's quantizer casts every int64 program input to int32 (TOSA has no int64), so a
``gather`` reads an int32 index. Where the op will not be delegated it runs on ExecuTorch's
portable kernel, which takes an int64 index only (``gather``: "Expected dtype int64 for index").
That is known before partitioning for: an op the target never delegates (Ethos-U55 has no TOSA
GATHER/SCATTER), a node whose arguments upstream's support check for the op rejects (Ethos-U85
takes a ``gather`` on dim 1 of rank-2/3 tensors only), and a node pinned by ``cpu_ops``. Such an
index is cast back to int64 right before the op, on the CPU; a delegated op keeps its int32
index. (The partitioner may not edit the graph once it knows the partitions, so a gather it
predicted delegated and then moved to the CPU, e.g. by the verified compile, is not covered.)
"""

from __future__ import annotations

from typing import List, Optional

import torch
from torch.export import ExportedProgram

from ethosu_ng.adapters import arm as upstream
from ethosu_ng.ops import CPU_PINNED_META
from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten

# Index ops whose portable kernel takes an int64 index only: the position of the index argument.
INT64_INDEX_ARGUMENT = {
    aten.gather.default: 2,
    aten.scatter.src: 2,
    aten.scatter.value: 2,
    aten.scatter_add.default: 2,
    aten.scatter_reduce.two: 2,
}


class CpuIndexInt64Pass(ProgramPass):
    modifies = frozenset({Aspect.CPU_INDEX_DTYPE})

    def _stays_on_cpu(self, node: torch.fx.Node) -> bool:
        return bool(
            upstream.never_delegated(self.spec, node.target)
            or (node.meta.get("custom") or {}).get(CPU_PINNED_META)
            or upstream.rejects_arguments(self.spec, node)
        )

    def _int32_index_on_cpu(self, node: torch.fx.Node) -> Optional[int]:
        """The position of ``node``'s index argument if it is an int32 index of an op the CPU
        will run; None otherwise."""
        k = INT64_INDEX_ARGUMENT.get(node.target) if node.op == "call_function" else None
        if k is None or len(node.args) <= k:
            return None
        index = node.args[k]
        val = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.dtype != torch.int32:
            return None
        return k if self._stays_on_cpu(node) else None

    def ensures(self, program: ExportedProgram) -> List[str]:
        """No index op the CPU runs reads an int32 index."""
        if self.spec is None:
            return []
        broken = []
        for n in program.graph_module.graph.nodes:
            k = self._int32_index_on_cpu(n)
            if k is not None:
                index = n.args[k].name
                broken.append(
                    f"{n.name} ({n.target}) runs on the CPU but reads int32 index {index}"
                )
        return broken

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.cast = []
        for node in list(graph.nodes):
            k = self._int32_index_on_cpu(node)
            if k is None:
                continue
            index = node.args[k]
            val = index.meta["val"]
            with graph.inserting_before(node):
                cast = graph.call_function(aten._to_copy.default, (index,), {"dtype": torch.int64})
            cast.meta = {k_: v for k_, v in node.meta.items() if k_ not in ("val", "tensor_meta")}
            with val.fake_mode:
                cast.meta["val"] = val.to(torch.int64)
            node.update_arg(k, cast)
            self.cast.append(node.name)
        if self.cast:
            graph.lint()
            program.graph_module.recompile()
        return program
