# SPDX-License-Identifier: BSD-3-Clause
"""Lower ``torch.roll`` with static shifts to slice + cat.

Keeps NPU coverage: the default decomposition turns ``roll`` into arange / add / fmod /
index_select, which the Ethos-U TOSA profile cannot run, so every shifted-window block of a Swin
transformer becomes a CPU island (upstream 1.5.1: 11 partitions, 102 CPU nodes on swin_tiny).
``roll(x, s, d)`` is exactly ``cat(x[..., n-s:], x[..., :n-s], d)`` per rolled dim; both are pure
data movement, so after CommuteQDQThroughPassThroughPass they run in int8 on the NPU.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.fx import Node

aten = torch.ops.aten


class LowerRollPass:
    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.lowered = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != aten.roll.default:
                continue
            x = node.args[0]
            shifts = node.args[1] if len(node.args) > 1 else node.kwargs.get("shifts")
            dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dims", [])
            shifts = [shifts] if isinstance(shifts, int) else list(shifts)
            dims = [dims] if isinstance(dims, int) else list(dims or [])
            val = node.meta.get("val")
            if (
                not dims
                or len(dims) != len(shifts)
                or not isinstance(val, torch.Tensor)
                or not all(isinstance(s, int) for s in shifts)
            ):
                continue  # flattened or symbolic roll: leave it to the default decomposition
            cur: Node = x
            shape = list(val.shape)
            with graph.inserting_before(node):
                for s, d in zip(shifts, dims):
                    d = d % len(shape)
                    n = shape[d]
                    if not isinstance(n, int):
                        break
                    s = s % n
                    if s == 0:
                        continue
                    tail = graph.call_function(aten.slice.Tensor, (cur, d, n - s, n))
                    head = graph.call_function(aten.slice.Tensor, (cur, d, 0, n - s))
                    cat = graph.call_function(aten.cat.default, ([tail, head], d))
                    for new, length in ((tail, s), (head, n - s)):
                        sub = list(shape)
                        sub[d] = length
                        new.meta = {
                            k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")
                        }
                        with val.fake_mode:
                            new.meta["val"] = torch.empty(sub, dtype=val.dtype)
                    cat.meta = dict(node.meta)
                    cur = cat
                else:
                    node.replace_all_uses_with(cur)
                    graph.erase_node(node)
                    self.lowered += 1
        if self.lowered:
            graph.eliminate_dead_code()
            graph.lint()
            program.graph_module.recompile()
        return program
