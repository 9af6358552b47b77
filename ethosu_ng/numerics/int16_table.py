# SPDX-License-Identifier: BSD-3-Clause
"""An int16 lookup as the hardware computes it: TOSA's 513-entry interpolated TABLE and the
power-of-two RESCALE after it.

Upstream lowers an int16 unary function (exp, rsqrt, sigmoid, ...) to this pair. Its result is
the function sampled at every 128th input code and interpolated linearly in between, so it is
not the function rounded once: measured on this repository's ``exp`` and ``rsqrt`` partitions,
2 steps apart where the function curves most. The verified compile evaluates such a lookup this
way (``op_numerics.exact_outputs(..., int16_tables=True)``) so that a lowering is judged against
the lookup it must implement, not against a precision no int16 table has.
"""

from __future__ import annotations

import torch

INT16_MIN, INT16_MAX = -32768, 32767


def table_lookup(codes: torch.Tensor, table: torch.Tensor, lshift: int) -> torch.Tensor:
    """TOSA TABLE (int16 in, 513 int16 entries, int32 out with 7 fraction bits), then RESCALE by
    ``2**lshift`` rounding half up, saturated to int16: int64 codes."""
    if table.numel() != 513:
        raise ValueError(f"an int16 TABLE has 513 entries, got {table.numel()}")
    index = codes.to(torch.int64) - INT16_MIN
    base, frac = index >> 7, index & 0x7F
    t = table.to(torch.int64)
    lo, hi = t[base], t[base + 1]
    value = (lo << 7) + (hi - lo) * frac
    if lshift >= 0:
        out = value << lshift
    else:
        out = (value + (1 << (-lshift - 1))) >> -lshift
    return out.clamp(INT16_MIN, INT16_MAX)
