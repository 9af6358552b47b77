# SPDX-License-Identifier: BSD-3-Clause
"""Rewrite ``avg_pool2d`` with ``divisor_override`` as a depthwise convolution, before annotation.

``divisor_override=d`` makes the op ``sum(window) / d``, padding and the part of a ``ceil_mode``
window past the input's edge adding zeros. Upstream's ``DecomposeAvgPool2dPass`` (run in the
quantizer's ``transform_for_annotation``) writes it as an average pool followed by a multiply by
``kernel / d``; quantized, the pool's int8 output is rounded and the multiply scales that rounding
up by ``kernel / d``: 3 LSB from the float op for a 3x2 kernel and ``d=4`` (a rounding tie in the
pool, half-up in TOSA and half-even in PyTorch, lands 2-3 output steps apart).

A depthwise convolution whose every weight is ``1/d`` computes the same sum with one rounding: the
weight quantizes exactly (per-channel, the only value is the channel's maximum), the accumulator
is exact, and only the output is rescaled. Zero padding is the convolution's own (``padding``);
the ``ceil_mode`` overhang is an explicit zero pad at the bottom and right. Runs on the ATen graph
in ``EthosUNGQuantizer.transform_for_annotation``, before upstream's passes, so the convolution is
annotated and lowered like any other.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten


def _pair(v) -> Tuple[int, int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1]))


def _arg(node: Node, k: int, name: str, default=None):
    if len(node.args) > k:
        return node.args[k]
    return node.kwargs.get(name, default)


def pooled_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """ATen's pooling_output_shape (dilation 1)."""
    span = size + 2 * pad - kernel
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1  # the last window must start inside the input or its left padding
    return out


def _overhang(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """Zeros past ``size + 2 * pad`` the last ``ceil_mode`` window reads."""
    out = pooled_size(size, kernel, stride, pad, ceil_mode)
    return max(0, (out - 1) * stride + kernel - (size + 2 * pad))


def _fake(like: Node, shape: Sequence[int]) -> Optional[torch.Tensor]:
    val = like.meta.get("val")
    if not isinstance(val, torch.Tensor) or getattr(val, "fake_mode", None) is None:
        return None
    with val.fake_mode:
        return torch.empty(list(shape), dtype=val.dtype)


class AvgPoolDivisorAsConvPass:
    """``avg_pool2d(x, k, s, p, ceil, _, d)`` -> ``conv2d(pad(x), full(1/d), s, p, groups=C)``."""

    def __call__(self, gm: GraphModule) -> GraphModule:
        graph = gm.graph
        self.rewritten = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != aten.avg_pool2d.default:
                continue
            divisor = _arg(node, 6, "divisor_override")
            x = node.args[0]
            val = x.meta.get("val") if isinstance(x, Node) else None
            if (
                divisor is None
                or not isinstance(val, torch.Tensor)
                or val.dim() != 4
                or not all(isinstance(d, int) for d in val.shape)
            ):
                continue  # symbolic or unbatched input: upstream's decomposition
            kernel = _pair(_arg(node, 1, "kernel_size"))
            stride = _arg(node, 2, "stride") or kernel
            stride = _pair(stride)
            padding = _pair(_arg(node, 3, "padding", 0))
            ceil_mode = bool(_arg(node, 4, "ceil_mode", False))
            n, c, h, w = val.shape
            extra_h = _overhang(h, kernel[0], stride[0], padding[0], ceil_mode)
            extra_w = _overhang(w, kernel[1], stride[1], padding[1], ceil_mode)

            name = f"_avg_pool_divisor_weight_{self.rewritten}"
            while hasattr(gm, name):
                name += "_"
            gm.register_buffer(
                name, torch.full((c, 1, *kernel), 1.0 / float(divisor), dtype=val.dtype)
            )
            with graph.inserting_before(node):
                src = x
                if extra_h or extra_w:
                    src = graph.call_function(
                        aten.pad.default, (x, [0, extra_w, 0, extra_h], "constant", 0.0)
                    )
                    src.meta = {k: v for k, v in node.meta.items() if k not in ("val",)}
                    src.meta["val"] = _fake(x, (n, c, h + extra_h, w + extra_w))
                weight = graph.get_attr(name)
                weight.meta["val"] = _fake(x, (c, 1, *kernel))
                conv = graph.call_function(
                    aten.conv2d.default,
                    (src, weight, None, list(stride), list(padding), [1, 1], c),
                )
                conv.meta = dict(node.meta)
            node.replace_all_uses_with(conv)
            graph.erase_node(node)
            self.rewritten += 1
        if self.rewritten:
            graph.eliminate_dead_code()
            graph.lint()
            gm.recompile()
        return gm
