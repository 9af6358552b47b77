# SPDX-License-Identifier: BSD-3-Clause
"""A TRANSPOSE of rank r -> reshape, the same transpose on the fewest dimensions, reshape back.

Size-1 dimensions carry no data, and input dimensions that stay next to each other in the same
order move as one block; merging them gives the lowest-rank transpose with the same element
order (``collapse``). Vela 5.1 splits high-rank transposes into several passes: measured on
ethos-u85-256, qkv's ``[64, 3, 4, 8] -> perm (1, 2, 0, 3)`` costs 36,170 NPU cycles in six
layers, the equivalent ``[64, 12, 8] -> perm (1, 0, 2)`` a fraction of that (docs/benchmarks.md).
The reshapes are free for Vela where they merge with a neighbouring reshape (``MergeReshapes``)
or Vela can alias them.

Not applied to a rank-4 transpose of one image that keeps the batch first (the NCHW <-> NHWC
layout transposes upstream puts around convolutions): Vela folds those into the neighbouring
operator (0 cycles) and does not fold the collapsed rank-2 form (measured on a timm
MobileVitBlock, ethos-u85-256: 0 -> 4,672-7,040 cycles each, and a copy of the graph input).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator, Tensor
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import perm_of
from ethosu_ng.tosa_optimize.rewrites.sink_transpose_to_cancel import SinkTransposeToCancel
from ethosu_ng.tosa_optimize.rewrites.unit_dim_transpose_to_reshape import (
    UnitDimTransposeToReshape,
)


def is_image_layout_transpose(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Any batch-1 rank-4 transpose that keeps the batch first: not collapsed (measured above)."""
    return len(shape) == 4 and shape[0] == 1 and perm[0] == 0


# The layout transposes upstream puts around convolutions, which Vela folds into them (0 cycles):
# the narrower set FuseTransposeChain's cost estimate counts as free.
NHWC_NCHW_PERMS = ((0, 2, 3, 1), (0, 3, 1, 2))


def is_nhwc_nchw_transpose(shape: Sequence[int], perm: Sequence[int]) -> bool:
    return len(shape) == 4 and shape[0] == 1 and tuple(perm) in NHWC_NCHW_PERMS


def collapse(shape: Sequence[int], perm: Sequence[int]) -> Optional[Tuple[List[int], List[int]]]:
    """(input shape, perm) of the lowest-rank transpose equal to ``transpose(x, perm)`` up to
    reshapes; None if that is ``perm`` itself."""
    kept = [p for p in perm if shape[p] != 1]  # output order, unit dimensions dropped
    runs: List[List[int]] = []
    for p in kept:
        if runs and runs[-1][-1] + 1 == p or (runs and _only_units_between(shape, runs[-1][-1], p)):
            runs[-1].append(p)
        else:
            runs.append([p])
    by_input = sorted(range(len(runs)), key=lambda k: runs[k][0])
    new_shape = [int(np.prod([shape[d] for d in runs[k]])) for k in by_input]
    new_perm = [by_input.index(k) for k in range(len(runs))]
    if len(new_shape) >= len(shape) or len(new_shape) < 2:
        return None
    return new_shape, new_perm


def _only_units_between(shape, a: int, b: int) -> bool:
    return b > a and all(shape[d] == 1 for d in range(a + 1, b))


class CollapseTransposeRank(TosaRewrite):
    # Last: a transpose that is a reshape, or that cancels, goes first (the reshapes this adds
    # would hide it from SinkTransposeToCancel).
    runs_after = (UnitDimTransposeToReshape, SinkTransposeToCancel)

    def apply(self, graph: Graph) -> int:
        changed = 0
        for op in list(graph.ops):
            if op.op != "TRANSPOSE":
                continue
            x, y = op.inputs[0], op.outputs[0]
            if is_image_layout_transpose(graph.shape_of(x), perm_of(op)):
                continue
            done = collapse(graph.shape_of(x), perm_of(op))
            if done is None:
                continue
            in_shape, perm = done
            flat_in = graph.insert_reshape(op, x, x, in_shape)
            flat_out = graph.fresh_name(y)
            out_shape = [in_shape[p] for p in perm]
            graph.tensors[flat_out] = Tensor(flat_out, out_shape, graph.tensors[x].dtype)
            op.inputs, op.outputs = [flat_in], [flat_out]
            op.attr = {**op.attr, "perms": perm}
            back = Operator("RESHAPE", [flat_out], [y], source=op.source)
            graph.ops.insert(graph.ops.index(op) + 1, back)
            back.inputs.append(graph.add_const_shape(back, y + "_shape", graph.shape_of(y)))
            changed += 1
        return changed
