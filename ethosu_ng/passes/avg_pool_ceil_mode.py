# SPDX-License-Identifier: BSD-3-Clause
"""Give every ``ceil_mode`` average pool a TOSA form without negative padding.

TOSA AVG_POOL2D needs ``(in + pad_before + pad_after - kernel)`` to be a multiple of the stride,
with no negative pad. Upstream computes ``pad_after`` from the output size and, for a
``ceil_mode`` pool, assumes it is never negative: ``SizeAdjustInputPass`` drops the rows no window
reads only for ``ceil_mode=False``. But PyTorch's ``ceil_mode`` drops a last window that would
start past the input and its left padding, which leaves such rows whenever the stride exceeds the
kernel (kernel 1, stride 2 over 2 rows: one output, ``pad_after = -1``). Vela then rejects the
graph ("At least one pad is smaller than zero") and the op falls back to the CPU.

Per spatial dim, the rows past the last window are unread, so dropping them changes nothing:

- if ``ceil_mode`` gives the same output size as ``floor`` in both dims, the node becomes
  ``ceil_mode=False`` (the same windows) and upstream slices what is left over;
- otherwise each dim whose ``pad_after`` would be negative is sliced to end where its last window
  ends, when ``ceil_mode`` over the sliced size gives the same output (else the node is left as
  it is, and Vela's refusal keeps it on the CPU with that reason).

Runs on the quantized ATen program: the slice sits between the pool and its dequantized input and
moves into int8 with the other data movement (CommuteQDQThroughPassThroughPass).
"""

from __future__ import annotations

from typing import List, Optional

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.passes.avg_pool_divisor_as_conv import pooled_size
from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten


def _pair(v) -> List[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(v[0]), int(v[-1])]


def _arg(node: Node, k: int, name: str, default=None):
    if len(node.args) > k:
        return node.args[k]
    return node.kwargs.get(name, default)


def _sliced_sizes(sizes, kernel, stride, padding) -> Optional[List[int]]:
    """Per dim, the input size with the unread trailing rows dropped (``None``: not possible)."""
    out = []
    for size, k, s, p in zip(sizes, kernel, stride, padding):
        n = pooled_size(size, k, s, p, True)
        after = (n - 1) * s + k - size - p
        if after >= 0:
            out.append(size)
            continue
        new = size + after
        if pooled_size(new, k, s, p, True) != n:
            return None
        out.append(new)
    return out


class AvgPoolCeilModePass(ProgramPass):
    """See module docstring. ``__call__`` mutates the program in place and returns it."""

    modifies = frozenset({Aspect.POOLS_AND_RESIZES, Aspect.DATA_MOVEMENT})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        gm = program.graph_module
        graph = gm.graph
        self.rewritten = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != aten.avg_pool2d.default:
                continue
            if not _arg(node, 4, "ceil_mode", False) or _arg(node, 6, "divisor_override"):
                continue
            x = node.args[0]
            val = x.meta.get("val") if isinstance(x, Node) else None
            if not isinstance(val, torch.Tensor) or val.dim() not in (3, 4):
                continue
            sizes = list(val.shape[-2:])
            if not all(isinstance(d, int) for d in sizes):
                continue  # symbolic sizes: left to upstream
            kernel = _pair(_arg(node, 1, "kernel_size"))
            stride = _pair(_arg(node, 2, "stride") or kernel)
            padding = _pair(_arg(node, 3, "padding", 0))
            dims = list(zip(sizes, kernel, stride, padding))
            if all(pooled_size(*d, True) == pooled_size(*d, False) for d in dims):
                args = list(node.args) + [None] * (5 - len(node.args))
                args[4] = False
                node.args = tuple(args)
                node.kwargs = {k: v for k, v in node.kwargs.items() if k != "ceil_mode"}
                self.rewritten += 1
                continue
            new_sizes = _sliced_sizes(sizes, kernel, stride, padding)
            if new_sizes is None or new_sizes == sizes:
                continue
            src: Node = x
            shape = list(val.shape)
            with graph.inserting_before(node):
                for axis, (old, new) in zip((-2, -1), zip(sizes, new_sizes)):
                    if new == old:
                        continue
                    axis = axis % len(shape)
                    src = graph.call_function(aten.slice.Tensor, (src, axis, 0, new))
                    src.meta = {
                        k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")
                    }
                    shape[axis] = new
                    with val.fake_mode:
                        src.meta["val"] = torch.empty(shape, dtype=val.dtype)
            node.replace_input_with(x, src)
            self.rewritten += 1
        if self.rewritten:
            graph.lint()
            gm.recompile()
        return program
