# SPDX-License-Identifier: BSD-3-Clause
"""How far the roundings of near ties can move a partition's outputs: a bound, per output
element, propagated through the graph. On an int16 partition it bounds the hardware reading; on
an 8-bit one the exact evaluation, where the TOSA graph rounds some of its near ties the other
way and a later op sums their steps with both signs (``verify_lowering``: consulted only where
an element lies beyond the run with every tie flipped).

The hardware reading (``int16_table``: the TOSA graph's lookup tables and 16-bit multipliers)
rounds each requantization of the exact real value. The TOSA graph rounds the same value
computed in integers (31-bit multipliers, the INT48 bias, an add's inputs rescaled to a common
32-bit scale), so wherever a value lies within ``NEAR_TIE`` of a rounding tie it may round the
other way, one step. A later op carries that step on, amplified: a LayerNorm's centred value
times its ``rsqrt`` turns one step into tens (timm deit_tiny, two blocks, a16w8: 800 to 1 400
near ties per sample, the graph up to 11 steps from the hardware reading at the logits). Which
way each tie goes is the integer arithmetic's business, so no single reading with ties flipped
one way bounds it; this module propagates the bound instead.

Each value carries ``delta``, the largest difference the ties so far can make to it (real units
for a float, steps for an integer), through each op by its local sensitivity: sums of deltas for
an add, ``|a| db + |b| da + da db`` for a product, the weights' magnitudes for a convolution,
linear or matmul, the table's own values over the codes within reach for a lookup, the same
rearrangement for a view, permute, slice or concatenation, the same split for a split or unbind
(a list of deltas, one per part, which ``getitem`` reads; a max pool's indices have none), the
largest delta of its window for a maximum or minimum, nothing for a constant padding, the
function's values over the codes within reach for an 8-bit lookup (an op upstream lowers to a
TABLE), ``e^(+-2m)`` of each output for a softmax whose inputs move by ``m``. A quantize's delta
is the number of ties within ``delta + NEAR_TIE`` of its value (how many grid steps its rounding
can move), then saturated. An op outside these rules makes the bound unknown (``Unbounded``).
"""

from __future__ import annotations

from typing import Optional

import torch

from ethosu_ng.ops import (
    DEQUANTIZE_OPS,
    DEQUANTIZE_PER_TENSOR_OPS,
    QUANTIZE_OPS,
    QUANTIZE_PER_TENSOR_OPS,
    op_name,
)


class Unbounded(ValueError):
    """An op whose sensitivity the bound does not model."""


# Ops that only move, copy or select elements: the same op on the deltas bounds them.
_REARRANGE = {
    "aten.view_copy.default",
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.permute_copy.default",
    "aten.permute.default",
    "aten.expand_copy.default",
    "aten.expand.default",
    "aten.clone.default",
    "aten._clone_dim_order.default",
    "dim_order_ops._clone_dim_order.default",
    "aten.slice_copy.Tensor",
    "aten.slice.Tensor",
    "aten.select_copy.int",
    "aten.select.int",
    "aten.squeeze_copy.dims",
    "aten.squeeze_copy.dim",
    "aten.squeeze.dims",
    "aten.unsqueeze_copy.default",
    "aten.unsqueeze.default",
    "aten.cat.default",
    "aten.repeat.default",
    "aten.transpose_copy.int",
    "aten.t_copy.default",
    "aten.alias_copy.default",
    "aten.index_select.default",
    "aten.pixel_shuffle.default",
    "aten.pixel_unshuffle.default",
    # nearest-neighbour resizing copies each output element from one input element
    "aten.upsample_nearest2d.vec",
    "aten.upsample_nearest2d.default",
    "aten._upsample_nearest_exact2d.vec",
    "aten._upsample_nearest_exact2d.default",
}
# 1-Lipschitz in each element, and elementwise or a max over a window: the same op on the
# deltas bounds them (for relu-like ops the delta itself does).
_ONE_LIPSCHITZ = {
    "aten.abs.default",
    "aten.relu.default",
    "aten.clamp.default",
    "aten.clamp.Tensor",
    "aten.hardtanh.default",
}
# Ops that split a tensor into parts (a list of tensors, which ``getitem`` reads): the same op
# on the deltas bounds each part.
_SPLIT = {
    "aten.split_with_sizes_copy.default",
    "aten.split_with_sizes.default",
    "aten.split_copy.Tensor",
    "aten.split.Tensor",
    "aten.unbind_copy.int",
    "aten.unbind.int",
    "aten.chunk.default",
    "aten.tensor_split.sections",
    "aten.tensor_split.indices",
}
_WINDOW_MAX = {
    "aten.amax.default",
    "aten.max_pool2d.default",
    "aten.max_pool2d_with_indices.default",
}
_LINEAR_IN_INPUT = {  # linear in the (only) activation: the same op on |delta|
    "aten.sum.dim_IntList",
    "aten.mean.dim",
    "aten.avg_pool2d.default",
    "aten.adaptive_avg_pool2d.default",
    "aten.neg.default",
    # bilinear resizing: each output a convex combination of input elements
    "aten.upsample_bilinear2d.vec",
    "aten.upsample_bilinear2d.default",
}


def _is_tensor(v) -> bool:
    return isinstance(v, torch.Tensor)


def _scalar(v) -> float:
    return float(v.item()) if _is_tensor(v) else float(v)


def ties_within(v: torch.Tensor, dv: torch.Tensor, near_tie: float, qmin, qmax) -> torch.Tensor:
    """How many grid steps the half-up rounding of a value in ``[v - dv, v + dv]`` (widened by
    ``near_tie``), saturated to ``[qmin, qmax]``, can differ from that of ``v``: the ties (x.5)
    within reach. ``v`` and the bounds on one grid: a quantize's codes less its zero point and
    ``qmin``/``qmax`` less it too (numbers, or tensors that broadcast per channel)."""
    lo = qmin.to(torch.float64) if isinstance(qmin, torch.Tensor) else float(qmin)
    hi = qmax.to(torch.float64) if isinstance(qmax, torch.Tensor) else float(qmax)

    def q(x):
        return torch.clamp(torch.floor(x + 0.5), lo, hi)

    mid = q(v)
    return torch.maximum(q(v + dv + near_tie) - mid, mid - q(v - dv - near_tie))


def table_delta(codes: torch.Tensor, dcodes: torch.Tensor, table: torch.Tensor, lshift: int):
    """The largest change of an int16 lookup (``int16_table.table_lookup``) over the input codes
    within ``dcodes`` of ``codes``. The table is linear between its knots (every 128 codes), so
    over an interval its extremes lie at the ends or at the knots inside; past two segments the
    whole table's span bounds it."""
    from ethosu_ng.numerics.int16_table import INT16_MAX, INT16_MIN, table_lookup

    reach = torch.ceil(dcodes).to(torch.int64)
    lo = (codes - reach).clamp(INT16_MIN, INT16_MAX)
    hi = (codes + reach).clamp(INT16_MIN, INT16_MAX)
    here = table_lookup(codes, table, lshift)
    worst = torch.zeros_like(here)
    points = [lo, hi]
    first_knot = ((lo - INT16_MIN + 127) // 128) * 128 + INT16_MIN
    for k in range(2):
        knot = first_knot + 128 * k
        points.append(torch.where(knot <= hi, knot, hi).clamp(INT16_MIN, INT16_MAX))
    for p in points:
        worst = torch.maximum(worst, (table_lookup(p, table, lshift) - here).abs())
    # Farther: the whole table's span (its extremes are at knots).
    knots = torch.arange(INT16_MIN, INT16_MAX + 2, 128).clamp(max=INT16_MAX)
    every = table_lookup(knots, table, lshift)
    span = every.max() - every.min()
    worst = torch.where(hi - lo > 256, span, worst)
    return worst.to(torch.float64)


def _is_8bit_lookup(node: torch.fx.Node) -> bool:
    """An op upstream lowers to an 8-bit TABLE: elementwise, on a per-tensor dequantized 8-bit
    input."""
    from ethosu_ng.adapters.arm import is_table_op

    src = node.args[0] if node.args else None
    if not isinstance(src, torch.fx.Node) or op_name(src.target) not in DEQUANTIZE_PER_TENSOR_OPS:
        return False
    qmin, qmax = src.args[3], src.args[4]
    return (
        isinstance(qmin, int) and isinstance(qmax, int) and qmax - qmin <= 255 and is_table_op(node)
    )


# A delta past any 8- or 16-bit grid: every quantize after it may take any value of its range.
_ANYTHING = 1e30


def _lookup_delta(node: torch.fx.Node, values: list, dx: torch.Tensor) -> torch.Tensor:
    """The largest change of ``node``'s function over the input codes within ``dx`` (real
    units) of each element's code, evaluated as the exact evaluation does (float64)."""
    src = node.args[0]
    scale, zp, qmin, qmax = (
        _scalar(src.args[1]),
        int(_scalar(src.args[2])),
        src.args[3],
        src.args[4],
    )
    x = values[0]
    grid = (torch.arange(qmin, qmax + 1, dtype=torch.float64) - zp) * scale
    table = node.target(grid, *values[1:], **node.kwargs).to(torch.float64)
    # A code outside the function's domain (an rsqrt below 0) may be within reach: no bound
    # but "anything", kept finite so that a later product with a zero stays a number.
    finite = torch.isfinite(table)
    table = torch.where(finite, table, torch.full_like(table, _ANYTHING))
    n = qmax - qmin + 1
    index = (torch.round(x / scale) + zp - qmin).clamp(0, n - 1).to(torch.int64)
    reach = torch.ceil(dx.expand(x.shape) / scale).to(torch.int64).clamp(0, n - 1)
    # farthest[c, r]: the largest change over the codes within r of code c (past the grid's
    # ends a code saturates to them): the running maximum, over r, of the change r codes away
    # on either side. An 8-bit grid's n x n table.
    codes = torch.arange(n).unsqueeze(1)
    away = torch.arange(n).unsqueeze(0)
    changes = []
    for there in ((codes - away).clamp(0, n - 1), (codes + away).clamp(0, n - 1)):
        moved = (table[there] - table.unsqueeze(1)).abs()
        changes.append(torch.where(finite[there] & finite.unsqueeze(1), moved, _ANYTHING))
    at = torch.maximum(*changes)
    at[:, 0] = 0.0  # no reach: no change, even at a code outside the domain
    farthest = torch.cummax(at, dim=1).values
    worst = farthest[index, reach]
    # The eager model and upstream's table read a code's value as float32 rounds it: where the
    # function is steep (acosh at 1: 1.0 in float32, 1 + 5.9e-8 in float64) that alone moves it.
    read32 = node.target(grid.to(torch.float32).to(torch.float64), *values[1:], **node.kwargs)
    both = finite & torch.isfinite(read32)
    rounding = torch.where(both, (read32.to(torch.float64) - table).abs(), _ANYTHING)
    return torch.maximum(worst, torch.where(finite, rounding, 0.0)[index])


class TieBound:
    """Per node, the delta of ``_Lockstep``'s value (see the module docstring). ``step``:
    called by the hardware reading's interpreter after each node with its arguments and
    result."""

    def __init__(self, near_tie: float):
        self.near_tie = near_tie
        self.delta: dict = {}

    def of(self, v) -> Optional[torch.Tensor]:
        if isinstance(v, torch.fx.Node):
            return self.delta.get(v)
        return None

    def _d(self, arg, value) -> torch.Tensor:
        """The delta of ``arg`` (an input node) as a tensor the shape of its ``value``."""
        d = self.of(arg)
        if d is None:
            if _is_tensor(value):
                return torch.zeros(value.shape, dtype=torch.float64)
            return torch.zeros((), dtype=torch.float64)
        return d

    def step(self, node: torch.fx.Node, values: list, result, table=None) -> None:
        """``values``: the node's arguments as the exact evaluation has them (float64 tensors,
        integer tensors, scalars), in the order of ``node.args``; ``table``: (codes, table,
        lshift, input scale, output scale) when the hardware reading evaluated ``node`` as an
        int16 lookup."""
        name = op_name(node.target)
        args = node.args
        ds = [self._d(a, v) if _is_tensor(v) else None for a, v in zip(args, values)]
        if name in QUANTIZE_OPS:
            self.delta[node] = self._quantize(name, values, values[0], ds[0])
        elif name in DEQUANTIZE_OPS:
            self.delta[node] = self._dequantize(name, values, ds[0], values[0])
        elif table is not None:
            codes, tab, lshift, in_scale, out_scale = table
            dcodes = ds[0] / in_scale
            self.delta[node] = table_delta(codes, dcodes, tab, lshift) * out_scale
        elif name in _REARRANGE:
            if name == "aten.cat.default":
                parts = [self._d(a, v) for a, v in zip(args[0], values[0])]
                self.delta[node] = torch.cat(parts, *values[1:])
            else:
                self.delta[node] = node.target(ds[0], *values[1:], **node.kwargs).to(torch.float64)
        elif name in _SPLIT:
            self.delta[node] = [
                d.to(torch.float64) for d in node.target(ds[0], *values[1:], **node.kwargs)
            ]
        elif name == "getitem":
            # One output of a multi-output op: its delta, where the op's rule gave one per output.
            parts = self.of(args[0])
            if not isinstance(parts, (list, tuple)) or parts[args[1]] is None:
                raise Unbounded(f"no rounding-sensitivity rule for output {args[1]} of {args[0]}")
            self.delta[node] = parts[args[1]]
        elif name in ("aten._softmax.default", "aten.softmax.int"):
            # Inputs within m of their values scale each output by at most e^(+-2m).
            dim = values[1]
            m = ds[0].expand(values[0].shape).amax(dim=dim, keepdim=True)
            self.delta[node] = (result * torch.expm1(2 * m)).to(torch.float64)
        elif _is_8bit_lookup(node):
            self.delta[node] = _lookup_delta(node, values, ds[0])
        elif name in ("aten.constant_pad_nd.default", "aten.pad.default"):
            # The padding is a constant: no tie moves it (a reflected or replicated border
            # moves as the elements it copies).
            mode = "constant"
            if name == "aten.pad.default":
                mode = values[2] if len(values) > 2 else node.kwargs.get("mode", "constant")
            pad = values[1]
            if mode == "constant":
                self.delta[node] = torch.nn.functional.pad(ds[0], list(pad), value=0.0)
            else:
                self.delta[node] = torch.nn.functional.pad(ds[0], list(pad), mode=mode)
        elif name in _ONE_LIPSCHITZ:
            self.delta[node] = ds[0]
        elif name in _WINDOW_MAX:
            out = node.target(ds[0], *values[1:], **node.kwargs)
            if isinstance(out, tuple):  # the maxima and their indices, which have no grid
                self.delta[node] = (out[0].to(torch.float64), None)
            else:
                self.delta[node] = out.to(torch.float64)
        elif name == "aten.amin.default":
            # A minimum moves no more than the most any element of its window moves.
            self.delta[node] = torch.amax(ds[0], *values[1:], **node.kwargs).to(torch.float64)
        elif name in _LINEAR_IN_INPUT:
            self.delta[node] = node.target(ds[0], *values[1:], **node.kwargs).abs()
        elif name in ("aten.add.Scalar", "aten.sub.Scalar", "aten.rsub.Scalar"):
            self.delta[node] = ds[0]
        elif name in ("aten.maximum.default", "aten.minimum.default"):
            self.delta[node] = torch.maximum(ds[0], ds[1]).expand(result.shape)
        elif name in ("aten.add.Tensor", "aten.sub.Tensor"):
            alpha = abs(float(node.kwargs.get("alpha", 1)))
            a = ds[0] if ds[0] is not None else torch.zeros(())
            b = ds[1] if len(ds) > 1 and ds[1] is not None else torch.zeros(())
            self.delta[node] = (a + alpha * b).expand(result.shape).to(torch.float64)
        elif name in ("aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor"):
            self.delta[node] = self._product(name, values, ds, result)
        elif name in ("aten.linear.default", "aten.convolution.default"):
            if any(d is not None and bool((d > 0).any()) for d in ds[1:]):
                raise Unbounded(f"{name} with uncertain weights")
            w = values[1].abs()
            rest = list(values[3:]) if name == "aten.convolution.default" else []
            out = node.target(ds[0], w, None, *rest)
            self.delta[node] = out.to(torch.float64)
        elif name in ("aten.bmm.default", "aten.mm.default", "aten.matmul.default"):
            a, b = values[0].abs(), values[1].abs()
            da, db = ds[0], ds[1]
            self.delta[node] = node.target(a, db) + node.target(da, b) + node.target(da, db)
        else:
            raise Unbounded(f"no rounding-sensitivity rule for {name}")

    def _quantize(self, name, args, x, dx) -> torch.Tensor:
        """Integer steps. The zero point cancels in a difference but not in the saturation: a
        code saturates at ``qmax``, so ``x / scale`` at ``qmax - zp`` (an asymmetric int8 range,
        zero point -128, saturates ``x / scale`` at 255, not 127)."""
        if name in QUANTIZE_PER_TENSOR_OPS:
            scale, zp, qmin, qmax = _scalar(args[1]), _scalar(args[2]), args[3], args[4]
            return ties_within(x / scale, dx / scale, self.near_tie, qmin - zp, qmax - zp)
        scales, zps, axis, qmin, qmax = args[1:6]
        shape = [1] * x.dim()
        shape[axis] = -1
        s = scales.to(torch.float64).view(shape)
        z = zps.to(torch.float64).view(shape)
        return ties_within(x / s, dx / s, self.near_tie, qmin - z, qmax - z)

    @staticmethod
    def _dequantize(name, args, dq, q) -> torch.Tensor:
        if name in DEQUANTIZE_PER_TENSOR_OPS:
            return dq * _scalar(args[1])
        scales, _zps, axis = args[1:4]
        shape = [1] * q.dim()
        shape[axis] = -1
        return dq * scales.to(torch.float64).view(shape)

    @staticmethod
    def _product(name, values, ds, result) -> torch.Tensor:
        a, b = values[0], values[1] if len(values) > 1 else None
        da, db = ds[0], ds[1] if len(ds) > 1 else None
        if not _is_tensor(b):
            return (da * abs(float(b))).expand(result.shape)
        if name == "aten.div.Tensor":
            if db is not None and bool((db > 0).any()):
                raise Unbounded("a division by an uncertain value")
            return (da / b.abs()).expand(result.shape)
        a_abs = a.abs() if _is_tensor(a) else torch.tensor(abs(float(a)), dtype=torch.float64)
        da = da if da is not None else torch.zeros(())
        db = db if db is not None else torch.zeros(())
        return (a_abs * db + b.abs() * da + da * db).expand(result.shape).to(torch.float64)
