# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""``RESCALE(RESCALE(x))`` with an 8/16-bit ``x`` -> one RESCALE, where that is exact.

Two RESCALEs in a row are two passes over the tensor (or one a neighbour cannot fold). Their
composition is one RESCALE only where the first rounding and clamp lose nothing the second would
see: a left shift into int32 followed by a requantization is, a requantization to int8 followed by
a rescale generally is not. Rather than reasoning case by case, the composition is computed over
the first RESCALE's whole input domain (256 or 65,536 values, ``_rescale.apply_rescale``) and
compared with the single RESCALE of multiplier ``m1 * m2`` and shift ``s1 + s2`` (powers of two
removed, or the product rounded to 31 bits): the merge happens only where they agree on every
input, so it is exact by exhaustion. Per-tensor, signed, SINGLE_ROUND RESCALEs only; the
intermediate tensor must have no other reader and not be a graph output.
"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    NARROW,
    Rescale,
    apply_rescale,
    read_rescale,
    reduce_scale,
    single_reader,
    single_round,
)

_DOMAIN = {
    "INT8": np.arange(-128, 128, dtype=np.int64),
    "INT16": np.arange(-32768, 32768, dtype=np.int64),
}


def _mergeable(r: Optional[Rescale]) -> bool:
    return r is not None and len(r.multiplier) == 1 and not r.unsigned and single_round(r)


def _candidates(r1: Rescale, r2: Rescale) -> Iterator[Tuple[int, int]]:
    """Single-RESCALE scales for ``r2 . r1``: the exact product, reduced, and rounded to a
    31-bit multiplier when it does not fit."""
    m, s = reduce_scale(r1.multiplier[0] * r2.multiplier[0], r1.shift[0] + r2.shift[0])
    if m < 1 << 31:
        yield m, s
        while m < 1 << 30 and s < 62:  # the same scale, normalised: more rounding headroom
            m, s = m << 1, s + 1
        yield m, s
        return
    d = m.bit_length() - 31
    yield (m + (1 << (d - 1))) >> d, s - d


def merged_scale(r1: Rescale, r2: Rescale) -> Optional[Tuple[int, int]]:
    """(multiplier, shift) of one RESCALE computing ``r2(r1(x))`` for every ``x`` of ``r1``'s
    input type, or None if no candidate does."""
    domain = _DOMAIN[r1.in_dtype]
    mid = apply_rescale(
        domain, r1.multiplier[0], r1.shift[0], r1.input_zp, r1.output_zp, r1.out_dtype
    )
    if mid is None:
        return None
    want = apply_rescale(
        mid, r2.multiplier[0], r2.shift[0], r2.input_zp, r2.output_zp, r2.out_dtype
    )
    if want is None:
        return None
    for m, s in _candidates(r1, r2):
        got = apply_rescale(domain, m, s, r1.input_zp, r2.output_zp, r2.out_dtype)
        if got is not None and np.array_equal(got, want):
            return m, s
    return None


class MergeConsecutiveRescales(TosaRewrite):
    def apply(self, graph: Graph) -> int:
        changed = 0
        producers, consumers = graph.producers(), graph.consumers()
        for op in list(graph.ops):
            r2 = read_rescale(graph, op)
            first = producers.get(op.inputs[0]) if r2 is not None else None
            r1 = read_rescale(graph, first) if first is not None else None
            if not (_mergeable(r1) and _mergeable(r2)) or r1.in_dtype not in NARROW:
                continue
            if single_reader(graph, consumers, op.inputs[0]) is not op:
                continue
            scale = merged_scale(r1, r2)
            if scale is None:
                continue
            self._merge(graph, first, op, scale)
            changed += 1
            # The maps stand for every question the loop asks later (a rebuild per merge is
            # quadratic in the graph). A merge changes no writer. ``op``'s old input had no
            # other reader. Its new input was read from the start by ``first`` (or by the head
            # of the chain ``first`` was merged from), which stays in the graph: a later reader
            # of it counts two readers with the old map or a new one.
        return changed

    @staticmethod
    def _merge(graph: Graph, first: Operator, op: Operator, scale: Tuple[int, int]) -> None:
        """``op`` reads ``first``'s input with the merged scale and ``first``'s input zero point
        (the same constant, of the input's type)."""
        m, s = scale
        y = op.outputs[0]
        op.inputs[0] = first.inputs[0]
        op.inputs[1] = graph.add_const(op, f"{y}_multiplier", np.full([1], m), "INT32")
        op.inputs[2] = graph.add_const(op, f"{y}_shift", np.full([1], s), "INT8")
        op.inputs[3] = first.inputs[3]
