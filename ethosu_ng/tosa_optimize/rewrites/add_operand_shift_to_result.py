# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""ADD/SUB whose two operand RESCALEs are the same left shift -> unit operand scales, the shift
taken off the result RESCALE.

Upstream scales both int8 operands of an ADD/SUB by ``2**20 * s_i / (2 * max(s_a, s_b))``; with
equal input scales (PoolFormer's ``pool(x) - x``, ``x + x``) both are the same pure left shift
``2**19``. Vela on Ethos-U55/U65 folds operand scales into ADD/SUB only when they differ or fit a
16-bit multiplier with no shift, so both RESCALEs and the result RESCALE stay standalone layers
(measured: 5 of PoolFormer's token mixer's layers on ethos-u55-128). A left shift ``2**k`` of both
operands commutes with the sum, so it moves to the result RESCALE, whose shift drops by ``k``:

    ((a + b) * 2**k * m + 2**(s-1)) >> s  ==  ((a + b) * m + 2**(s-k-1)) >> (s-k)

exactly (single rounding, ``s - k >= 2``), and the unscaled sum is smaller in magnitude, so no
int32 overflow is introduced. Unit operand scales fold on every target.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    Rescale,
    is_operand_rescale,
    read_rescale,
    reduce_scale,
    single_reader,
)
from ethosu_ng.tosa_optimize.rewrites.split_shared_rescale import SplitSharedRescale

MIN_SHIFT = 2  # TOSA's smallest RESCALE shift


def left_shift(r: Rescale) -> Optional[int]:
    """``k`` if ``r`` multiplies by exactly ``2**k`` (k >= 1), else None."""
    if len(r.multiplier) != 1:
        return None
    m, s = reduce_scale(r.multiplier[0], r.shift[0])
    if s != 0 or m < 2 or m & (m - 1):
        return None
    return m.bit_length() - 1


def _single_round(r: Rescale) -> bool:
    return str(r.op.attr.get("rounding_mode", "")).endswith("SINGLE_ROUND")


class AddOperandShiftToResult(TosaRewrite):
    # Shared operand RESCALEs are split first; this one needs each to have one reader.
    runs_after = (SplitSharedRescale,)

    def apply(self, graph: Graph) -> int:
        changed = 0
        producers = graph.producers()
        consumers = graph.consumers()
        for op in list(graph.ops):
            if op.op not in ("ADD", "SUB") or op.inputs[0] == op.inputs[1]:
                continue
            operands = [
                read_rescale(graph, producers.get(t)) if t in producers else None
                for t in op.inputs[:2]
            ]
            if not all(is_operand_rescale(r) and _single_round(r) for r in operands):
                continue
            if not all(single_reader(graph, consumers, r.op.outputs[0]) is op for r in operands):
                continue
            k = left_shift(operands[0])
            if k is None or left_shift(operands[1]) != k:
                continue
            result_op = single_reader(graph, consumers, op.outputs[0])
            result = read_rescale(graph, result_op) if result_op is not None else None
            if result is None or not _single_round(result) or result.input_zp != 0:
                continue
            if min(result.shift) - k < MIN_SHIFT:
                continue
            for r in operands:
                self._set_unit_scale(graph, r)
            shifts = np.asarray(result.shift, dtype=np.int64) - k
            shape = graph.shape_of(result_op.inputs[2])
            result_op.inputs[2] = graph.add_const(
                result_op, f"{result_op.outputs[0]}_shift", shifts.reshape(shape), "INT8"
            )
            changed += 1
            # Only the RESCALEs' constant inputs changed: the writers and readers of every
            # operand and result the loop asks about are as they were.
        return changed

    @staticmethod
    def _set_unit_scale(graph: Graph, r: Rescale) -> None:
        op: Operator = r.op
        mult_dtype = graph.tensors[op.inputs[1]].dtype
        bits = 30 if mult_dtype == "INT32" else 14
        shape = graph.shape_of(op.inputs[1])
        op.inputs[1] = graph.add_const(
            op, f"{op.outputs[0]}_multiplier", np.full(shape, 1 << bits), mult_dtype
        )
        op.inputs[2] = graph.add_const(op, f"{op.outputs[0]}_shift", np.full(shape, bits), "INT8")
