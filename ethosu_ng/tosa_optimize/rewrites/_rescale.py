# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""RESCALE parameters as the rescale rewrites and the rescale report read them, and which
consumers Vela 5.1 folds an operand RESCALE into.

A TOSA RESCALE reads ``[x, multiplier, shift, input_zp, output_zp]``: it computes
``((x - input_zp) * multiplier + round) >> shift + output_zp``, clamped to the output type.
Vela (``GraphIrOptimiser::FuseRescale``, regor) folds a RESCALE into the operator that reads its
output (the operand scale of an elementwise ADD/SUB/MUL) or into the one that writes its input
(the output scale of a convolution, pooling, elementwise operator ...) only if the tensor it
folds away has one reader and one writer; for a binary operator both operands must fold, or
neither (measured with Vela on small graphs: tests/test_rescale_rewrites.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator

# Elementwise binary operators whose int32 operands Vela takes from an 8/16-bit tensor with the
# operand RESCALE folded into the operation: ADD/SUB with any per-tensor operand scale (U85;
# U55/U65 in the forms upstream emits), MUL only with a unit operand scale (no input scaling).
OPERAND_SCALING = {"ADD": "any", "SUB": "any", "MUL": "unit"}
NARROW = ("INT8", "INT16")
# Operators Vela gives an output scale (a RESCALE of their result folds into them).
OUTPUT_SCALING = frozenset(
    {"CONV2D", "DEPTHWISE_CONV2D", "TRANSPOSE_CONV2D", "CONV3D", "MATMUL", "MAX_POOL2D"}
    | {"AVG_POOL2D", "REDUCE_SUM", "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM"}
)


@dataclass(frozen=True)
class Rescale:
    """One RESCALE's parameters (``multiplier``/``shift`` per channel or of length 1)."""

    op: Operator
    in_dtype: str
    out_dtype: str
    multiplier: Tuple[int, ...]
    shift: Tuple[int, ...]
    input_zp: int
    output_zp: int

    @property
    def per_channel(self) -> bool:
        return bool(self.op.attr.get("per_channel"))

    @property
    def unsigned(self) -> bool:
        return bool(self.op.attr.get("input_unsigned") or self.op.attr.get("output_unsigned"))

    @property
    def is_unit_scale(self) -> bool:
        return all(reduce_scale(m, s) == (1, 0) for m, s in zip(self.multiplier, self.shift))


def reduce_scale(multiplier: int, shift: int) -> Tuple[int, int]:
    """``multiplier / 2**shift`` with the common powers of two removed."""
    m, s = int(multiplier), int(shift)
    if m == 0:
        return 0, 0
    while m % 2 == 0 and s > 0:
        m //= 2
        s -= 1
    return m, s


def _scalar(graph: Graph, name: str) -> Optional[int]:
    arr = graph.const_array(name)
    if arr is None or arr.size != 1:
        return None
    return int(np.asarray(arr).ravel()[0])


def read_rescale(graph: Graph, op: Operator) -> Optional[Rescale]:
    """The parameters of a RESCALE whose parameters are constants; None otherwise."""
    if op.op != "RESCALE" or len(op.inputs) != 5:
        return None
    mult, shift = graph.const_array(op.inputs[1]), graph.const_array(op.inputs[2])
    izp, ozp = _scalar(graph, op.inputs[3]), _scalar(graph, op.inputs[4])
    if mult is None or shift is None or izp is None or ozp is None:
        return None
    return Rescale(
        op,
        graph.tensors[op.inputs[0]].dtype,
        graph.tensors[op.outputs[0]].dtype,
        tuple(int(v) for v in np.ravel(mult)),
        tuple(int(v) for v in np.ravel(shift)),
        izp,
        ozp,
    )


def is_operand_rescale(r: Optional[Rescale]) -> bool:
    """An 8/16-bit -> int32 per-tensor RESCALE of the kind upstream puts before an elementwise
    operator (signed, output zero point 0)."""
    return (
        r is not None
        and r.in_dtype in NARROW
        and r.out_dtype == "INT32"
        and not r.per_channel
        and not r.unsigned
        and r.output_zp == 0
    )


def absorbs_operand(consumer: Operator, r: Optional[Rescale]) -> bool:
    """Vela folds ``r`` into ``consumer`` as an operand scale, given ``r``'s output has no
    other reader (and, for a binary operator, the other operand folds too)."""
    kind = OPERAND_SCALING.get(consumer.op)
    if kind is None or not is_operand_rescale(r):
        return False
    return kind == "any" or r.is_unit_scale


def single_reader(graph: Graph, consumers, name: str) -> Optional[Operator]:
    """The one operator that reads ``name``, once, if ``name`` is not a graph output."""
    readers = consumers.get(name, [])
    if len(readers) != 1 or name in graph.outputs or readers[0].inputs.count(name) != 1:
        return None
    return readers[0]


_BOUNDS = {"INT8": (-128, 127), "INT16": (-32768, 32767), "INT32": (-(2**31), 2**31 - 1)}


def single_round(r: Rescale) -> bool:
    """``r`` rounds once (SINGLE_ROUND, 32-bit multiplier): what ``apply_rescale`` models."""
    return bool(r.op.attr.get("scale32")) and str(r.op.attr.get("rounding_mode", "")).endswith(
        "SINGLE_ROUND"
    )


def apply_rescale(
    values: np.ndarray, multiplier: int, shift: int, input_zp: int, output_zp: int, out_dtype: str
) -> Optional[np.ndarray]:
    """TOSA 1.0 RESCALE (``scale32``, SINGLE_ROUND, signed, per tensor) of int64 ``values``;
    None where the specification's REQUIREs fail (a value at or beyond ``2**(shift - 1)``, an
    int32 overflow before the zero point), so that no graph is rewritten into an invalid one."""
    if multiplier < 0 or not 2 <= shift <= 62:
        return None
    v = values.astype(np.int64) - input_zp
    if v.min() < -(1 << (shift - 1)) or v.max() >= 1 << (shift - 1):
        return None
    prod = [int(x) * multiplier + (1 << (shift - 1)) for x in (v.min(), v.max())]
    if max(abs(p) for p in prod) >= 1 << 63:
        return None
    scaled = (v * multiplier + (1 << (shift - 1))) >> shift
    lo32, hi32 = _BOUNDS["INT32"]
    if scaled.min() < lo32 or scaled.max() > hi32:
        return None
    lo, hi = _BOUNDS[out_dtype]
    return np.clip(scaled + output_zp, lo, hi)
