# SPDX-License-Identifier: BSD-3-Clause
"""Lower ``torch.roll`` with static shifts to slice + cat.

Keeps NPU coverage: the default decomposition turns ``roll`` into arange / add / fmod /
index_select, which the Ethos-U TOSA profile cannot run, so every shifted-window block of a Swin
transformer becomes a CPU island (upstream 1.5.1: 11 partitions, 102 CPU nodes on swin_tiny).
``roll(x, s, d)`` is exactly ``cat(x[..., n-s:], x[..., :n-s], d)`` per rolled dim; both are pure
data movement, so after CommuteQDQThroughPassThroughPass they run in int8 on the NPU.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten


def _static_roll(node: Node) -> Optional[Tuple[List[int], List[int]]]:
    """(shifts, dims) of a roll with static shifts over named dims of static size; None for a
    flattened or symbolic roll, which the default decomposition lowers."""
    if node.op != "call_function" or node.target != aten.roll.default:
        return None
    shifts = node.args[1] if len(node.args) > 1 else node.kwargs.get("shifts")
    dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dims", [])
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    val = node.meta.get("val")
    if (
        not dims
        or len(dims) != len(shifts)
        or not isinstance(val, torch.Tensor)
        or val.dim() == 0
        or not all(isinstance(s, int) for s in shifts)
        or not all(isinstance(val.shape[d % val.dim()], int) for d in dims)
    ):
        return None
    return shifts, dims


class LowerRollPass(ProgramPass):
    modifies = frozenset({Aspect.SLICES_AND_CATS, Aspect.DATA_MOVEMENT})

    def ensures(self, program: ExportedProgram) -> List[str]:
        """No roll with static shifts over static dims is left."""
        return [
            f"{n.name} (aten.roll) has static shifts and dims but is not lowered"
            for n in program.graph_module.graph.nodes
            if _static_roll(n) is not None
        ]

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.lowered = 0
        for node in list(graph.nodes):
            roll = _static_roll(node)
            if roll is None:
                continue
            shifts, dims = roll
            x = node.args[0]
            val = node.meta["val"]
            cur: Node = x
            shape = list(val.shape)
            with graph.inserting_before(node):
                for s, d in zip(shifts, dims):
                    d = d % len(shape)
                    n = shape[d]
                    if n == 0 or s % n == 0:
                        continue  # an empty dim or a whole turn moves nothing
                    s = s % n
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
            node.replace_all_uses_with(cur)
            graph.erase_node(node)
            self.lowered += 1
        if self.lowered:
            graph.eliminate_dead_code()
            graph.lint()
            program.graph_module.recompile()
        return program
