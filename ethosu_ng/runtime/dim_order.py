# SPDX-License-Identifier: BSD-3-Clause
"""Inputs laid out as the program planned: ``executorch.runtime`` copies an input's storage as it
is into the planned input buffer (it ignores torch strides), as ``Method::set_input`` does on the
device, so each tensor must be dense in the dim order the program planned for it."""

from __future__ import annotations

from typing import Optional, Sequence


def to_dim_order(t, order: Sequence[int]):
    """The same logical tensor stored densely in ``order`` (``(0, 2, 3, 1)`` = channels-last)."""
    order = tuple(order)
    if _dense_in(t, order):
        return t
    inverse = [order.index(i) for i in range(len(order))]
    return t.permute(order).contiguous().permute(inverse)


def _dense_in(t, order) -> bool:
    """Is ``t`` already dense in ``order``? (Size-1 dims may have any stride.)"""
    expected, stride = [0] * t.dim(), 1
    for d in reversed(order):
        expected[d] = stride
        stride *= t.shape[d]
    return all(t.shape[d] == 1 or t.stride(d) == expected[d] for d in range(t.dim()))


def _dense_order(t) -> Optional[tuple]:
    """The dim order ``t`` is dense in (a known layout first where size-1 dims leave several),
    or None for a tensor dense in none (a slice, an expanded view)."""
    from ethosu_ng.io_layout import LAYOUTS

    candidates = [o for o in LAYOUTS.values() if len(o) == t.dim()]
    candidates.append(tuple(sorted(range(t.dim()), key=lambda d: -t.stride(d))))
    return next((o for o in candidates if _dense_in(t, o)), None)


def check_input_layouts(inputs: Sequence, orders: Sequence[Optional[tuple]]) -> list:
    """``inputs`` as the program takes them: each tensor must be dense in the dim order the
    program planned for it (``orders``), as on the device, where ExecuTorch copies an input's
    bytes as they are. A tensor dense in another order is a ``LayoutError`` naming it; one dense
    in no order (a slice, an expanded view) has no layout of its own and is copied into the
    program's. ``to_dim_order`` lays a tensor out as a program takes it."""
    from ethosu_ng.io_layout import LayoutError, layout_of

    def name(order) -> str:
        return f"{layout_of(order) or 'dim order'} {list(order)}"

    out = list(inputs)
    if len(orders) != len(out):
        return out  # the count is ExecuTorch's to check
    for k, (t, want) in enumerate(zip(out, orders)):
        if want is None or not hasattr(t, "stride") or t.dim() != len(want):
            continue
        if _dense_in(t, want):
            continue
        got = _dense_order(t)
        if got is None:
            out[k] = to_dim_order(t, want)
            continue
        raise LayoutError(
            f"input {k}: a tensor laid out {name(got)}, the program takes {name(want)}; lay it "
            f"out with ethosu_ng.runtime.to_dim_order(t, {list(want)})"
            + (
                " (t.contiguous(memory_format=torch.channels_last))"
                if layout_of(want) == "nhwc"
                else ""
            )
        )
    return out
