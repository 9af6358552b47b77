# SPDX-License-Identifier: BSD-3-Clause
"""An accumulator read by its 8/16-bit RESCALE and by an int32 RESCALE at the same scale ->
the int32 one reads the 8/16-bit result and shifts it left.

Upstream's a16w8 convolution (``RewriteConvPass``) gives an int32 consumer (a residual ADD's
operand) its own RESCALE from the INT48 accumulator, the convolution's requantization with the
ADD's operand shift ``2**k`` folded in, beside the requantization to int16 the next convolution
reads. The accumulator then has two readers, so Vela folds neither into the convolution: two
standalone per-channel RESCALE passes over INT48 (measured on ethos-u85-256, an a16w8
mobilenet_v3_small: 8 layers, 413,706 of 3,065,636 NPU cycles). Reading the int16 result and
shifting it left by ``k`` leaves the accumulator one reader (its requantization folds into the
convolution) and one int16 -> int32 pass.

Not bit-exact to the graph before: the int32 operand is the int16 result, rounded and clamped,
times ``2**k`` instead of the accumulator rounded ``k`` bits finer. That is the value the
quantized model computes (its convolution output is quantized to int16 once, and the ADD reads
it), so the rewritten graph is the quantized model's arithmetic on that operand
(tests/test_rescale_rewrites.py compares both graphs with it).
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    NARROW,
    Rescale,
    apply_rescale,
    read_rescale,
)

ACCUMULATORS = ("INT32", "INT48")
_RANGE = {"INT8": (-128, 127), "INT16": (-32768, 32767)}


def _left_shift(narrow: Rescale, wide: Rescale) -> Optional[int]:
    """``k`` where ``wide`` is ``narrow`` with ``2**k`` more scale (same multipliers, shifts
    ``k`` less, same input zero point, output zero point 0); None otherwise."""
    if (
        narrow.out_dtype not in NARROW
        or wide.out_dtype != "INT32"
        or narrow.unsigned
        or wide.unsigned
        or wide.output_zp != 0
        or wide.input_zp != narrow.input_zp
        or len(wide.multiplier) != len(narrow.multiplier)
        or wide.multiplier != narrow.multiplier
    ):
        return None
    ks = {n - w for n, w in zip(narrow.shift, wide.shift)}
    if len(ks) != 1:
        return None
    k = ks.pop()
    return k if k >= 0 else None


def _exact_left_shift(dtype: str, zp: int, k: int) -> bool:
    """RESCALE(multiplier 2**30, shift 30 - k) of every ``dtype`` value is ``(v - zp) * 2**k``."""
    if not 2 <= 30 - k <= 62:
        return False
    lo, hi = _RANGE[dtype]
    domain = np.arange(lo, hi + 1, dtype=np.int64)
    got = apply_rescale(domain, 1 << 30, 30 - k, zp, 0, "INT32")
    return got is not None and np.array_equal(got, (domain - zp) << k)


def _widen(graph: Graph, narrow: Rescale, wide: Rescale, k: int) -> None:
    """``wide`` becomes RESCALE(narrow's output) by ``2**k`` (per tensor, exact)."""
    op, y = wide.op, narrow.op.outputs[0]
    op.inputs[0] = y
    op.attr = dict(
        op.attr, per_channel=False, scale32=True, input_unsigned=False, output_unsigned=False
    )
    name = op.outputs[0]
    op.inputs[1:] = [
        graph.add_const(op, f"{name}_multiplier", np.array([1 << 30]), "INT32"),
        graph.add_const(op, f"{name}_shift", np.array([30 - k]), "INT8"),
        graph.add_const(op, f"{name}_input_zp", np.array([narrow.output_zp]), narrow.out_dtype),
        graph.add_const(op, f"{name}_output_zp", np.array([0]), "INT32"),
    ]


class WidenFromNarrowSibling(TosaRewrite):
    exact = False  # the int32 operand is rounded as the quantized model rounds it

    def apply(self, graph: Graph) -> int:
        changed = 0
        consumers = graph.consumers()
        for producer in list(graph.ops):
            for x in producer.outputs:
                t = graph.tensors.get(x)  # None: a shape value
                if t is None or t.dtype not in ACCUMULATORS or x in graph.outputs:
                    continue
                readers: List[Operator] = consumers.get(x, [])
                rescales = [read_rescale(graph, c) for c in readers]
                if len(readers) < 2 or any(
                    r is None or r.op.inputs.count(x) != 1 for r in rescales
                ):
                    continue
                for narrow in rescales:
                    others = [r for r in rescales if r is not narrow]
                    shifts = [_left_shift(narrow, w) for w in others]
                    if any(k is None for k in shifts) or not all(
                        _exact_left_shift(narrow.out_dtype, narrow.output_zp, k) for k in shifts
                    ):
                        continue
                    for wide, k in zip(others, shifts):
                        _widen(graph, narrow, wide, k)
                    changed += 1
                    consumers = graph.consumers()
                    break
        if changed:
            graph.restore_order()  # the int32 RESCALE may have come before the one it now reads
        return changed
