# SPDX-License-Identifier: BSD-3-Clause
"""A TRANSPOSE of (collapsed) rank >= 4 that keeps its innermost dimension -> a chain of rank-3
block swaps ``[M, N, Q] -> perm (1, 0, 2)`` with reshapes between.

Vela 5.1 splits such a transpose into many passes with short bursts; the same element order
reached by swapping the two leading blocks of a rank-3 view, a few times over, keeps every burst
``Q`` elements long and runs in one pass per swap. Measured in isolation (Vela NPU cycles,
``in -> transpose -> out``):

| shape, perm | ethos-u85-256 | ethos-u55-128 |
|---|---|---|
| qkv ``[64, 16, 3, 4, 24]`` ``(2, 0, 3, 1, 4)`` | 3,111,976 -> 347,093 | 1,106,336 -> 147,520 |
| heads back ``[64, 16, 4, 24]`` ``(0, 2, 1, 3)`` | 416,520 -> 118,116 | 147,616 -> 49,216 |
| MobileViT unfold ``[384, 2, 8, 2]`` ``(0, 2, 1, 3)`` | 153,473 -> 80,232 | 26,272 -> 7,744 |

Only the innermost-kept case: a swap whose innermost block is a single dimension that moves
(``Q == 1``) costs ethos-u85-256 several times the original (``[64, 48, 32]`` ``(1, 2, 0)``:
51,400 as one transpose, 786,968 as a swap of ``[64, 1536, 1]``). Batch-1 rank-4 layout
transposes are left to Vela, which folds them into their neighbour (``CollapseTransposeRank``).
The plan is the fewest swaps (breadth-first over block orders; the state space is at most
``(rank - 1)!`` orders: ``_layout.swap_plan``).
"""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import perm_of, swap_plan, swap_views
from ethosu_ng.tosa_optimize.rewrites.collapse_transpose_rank import CollapseTransposeRank, collapse
from ethosu_ng.tosa_optimize.rewrites.fuse_transpose_chain import FuseTransposeChain
from ethosu_ng.tosa_optimize.rewrites.unit_dim_transpose_to_reshape import moves_only_unit_dims

SWAP_PERM = [1, 0, 2]


class DecomposeTranspose(TosaRewrite):
    # After the rank is as low as it goes and chains are fused; cancelling pairs see the
    # original transpose.
    runs_after = (CollapseTransposeRank, FuseTransposeChain)

    def apply(self, graph: Graph) -> int:
        changed = 0
        for op in list(graph.ops):
            if op.op != "TRANSPOSE":
                continue
            x, y = op.inputs[0], op.outputs[0]
            shape, perm = graph.shape_of(x), perm_of(op)
            if moves_only_unit_dims(shape, perm) or graph.is_constant(x):
                continue  # a reshape; or constant data, which Vela moves at compile time
            # (A batch-1 layout transpose collapses to rank 3 and gets no plan: left to Vela.)
            in_shape, in_perm = collapse(shape, perm) or (shape, list(perm))
            plan = swap_plan(in_perm)
            if not plan:
                continue
            cur = x
            for k, view in enumerate(swap_views(in_shape, plan)):
                cur = graph.insert_reshape(op, cur, f"{y}_swap{k}_in", view)
                cur = graph.insert_transpose(op, cur, f"{y}_swap{k}", SWAP_PERM, op.attr)
            graph.become_reshape(op, cur)  # to the original output shape
            changed += 1
        return changed
