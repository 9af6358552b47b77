# SPDX-License-Identifier: BSD-3-Clause
"""On Ethos-U55/U65, a per-plane op over a batch above 1 reads its batch as channels.

Upstream's Ethos-U55 support takes an average pool and a nearest resize only at batch 1
(``pool_2d_support.py``: "Avgpool2d needs N==1"; ``ethos_u55_support.py``: "U55 nearest-neighbor
resize requires batch size 1."), so at batch 2 or more they run on the CPU. Both compute each
(n, c) plane on its own, so over ``x.view(1, N * C, H, W)`` they compute the same planes, and
``view(N, C, H', W')`` of the result is the op's result. Each such node with a contiguous 4-D input
of static batch N > 1, which upstream's check takes at batch 1 (an average pool's kernel, stride
and padding; a resize's equal 2x, 4x or 8x upscale), reads its input through that view and its
users read the view back. The views sit between the op and its dequantized input and quantized
output, and move into int8 with the other data movement (CommuteQDQThroughPassThroughPass).
"""

from __future__ import annotations

from typing import List

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten

# Ops computing each (n, c) plane of a 4-D NCHW input on its own, whose U55 support needs N == 1.
PER_PLANE_OPS = (
    aten.avg_pool2d.default,
    aten.adaptive_avg_pool2d.default,
    aten.upsample_nearest2d.vec,
    aten.upsample_nearest2d.default,
)


def _view(graph, src: Node, shape: List[int], like: Node, val) -> Node:
    out = graph.call_function(aten.view.default, (src, shape))
    out.meta = {k: v for k, v in like.meta.items() if k not in ("val", "tensor_meta")}
    with val.fake_mode:
        out.meta["val"] = torch.empty(shape, dtype=val.dtype)
    return out


def _u55_resize(node: Node, shape: List[int], out_shape: List[int]) -> bool:
    """Upstream's Ethos-U55 condition on a nearest resize besides its batch
    (``EthosU55ResizeCheck``): an equal 2x, 4x or 8x upscale of both spatial dims."""
    scales = node.args[2] if node.target == aten.upsample_nearest2d.vec else None
    if scales is not None and not (len(scales) == 2 and scales[0] == scales[1] in (2, 4, 8)):
        return False
    h, w = shape[2:]
    return any(out_shape[2:] == [h * k, w * k] for k in (2, 4, 8))


class BatchIntoChannelsPass(ProgramPass):
    """See module docstring. ``__call__`` mutates the program in place and returns it."""

    # Folds the pools and resizes those passes leave (a resize read by index is no resize).
    modifies = frozenset({Aspect.DATA_MOVEMENT})
    requires = frozenset({Aspect.POOLS_AND_RESIZES})

    def _taken_at_batch_1(self, node: Node, shape: List[int], out_shape: List[int]) -> bool:
        """Whether upstream's support check takes ``node`` now that it reads batch 1."""
        from ethosu_ng.adapters import arm as upstream

        if node.target == aten.avg_pool2d.default:
            return not upstream.rejects_arguments(self.spec, node)
        if node.target in (aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default):
            return _u55_resize(node, shape, out_shape)
        return True  # adaptive: upstream writes it as average pools after partitioning

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        from ethosu_ng.adapters import arm as upstream

        self.rewritten: List[str] = []
        if not upstream.lacks_conv3d(self.spec):  # the U55 subset of TOSA
            return program
        gm = program.graph_module
        graph = gm.graph
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in PER_PLANE_OPS:
                continue
            x = node.args[0]
            val, out_val = x.meta.get("val"), node.meta.get("val")
            if not isinstance(val, torch.Tensor) or not isinstance(out_val, torch.Tensor):
                continue
            shape, out_shape = list(val.shape), list(out_val.shape)
            if len(shape) != 4 or not all(isinstance(d, int) for d in shape + out_shape):
                continue  # symbolic or not NCHW: left to upstream
            if shape[0] <= 1 or not val.is_contiguous():
                continue
            n, c = shape[0], shape[1]
            with graph.inserting_before(node):
                folded = _view(graph, x, [1, n * c, *shape[2:]], x, val)
            node.replace_input_with(x, folded)
            with val.fake_mode:
                node.meta["val"] = torch.empty([1, n * c, *out_shape[2:]], dtype=out_val.dtype)
            if not self._taken_at_batch_1(node, shape, out_shape):
                # Upstream refuses the op for another reason: the views would only add CPU ops.
                node.replace_input_with(folded, x)
                graph.erase_node(folded)
                node.meta["val"] = out_val
                continue
            with graph.inserting_after(node):
                back = _view(graph, node, out_shape, node, out_val)
            node.replace_all_uses_with(
                back, delete_user_cb=lambda user, back=back: user is not back
            )
            self.rewritten.append(node.name)
        if self.rewritten:
            graph.lint()
            gm.recompile()
        return program
