# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""A per-tensor RESCALE on the far side of data movement from the operator that would fold it
-> the RESCALE moved next to that operator.

Vela folds a RESCALE only into the operator writing its input or reading its output; data
movement in between keeps it a layer of its own, and the data movement then moves int32 data.
Two directions:

- toward the writer: ``RESCALE(DM(x))`` of an int32 ``x`` written by an operator that takes an
  output scale (a convolution, pooling, ADD/SUB/MUL ...; ``_rescale.OUTPUT_SCALING``) and read
  only by ``DM``: becomes ``DM(RESCALE(x))``; for a CONCAT, every input so written gets its own
  copy of the RESCALE;
- toward the reader: ``C(DM(RESCALE(x)))`` where the RESCALE is an operand scale ``C`` folds
  (``_rescale.absorbs_operand``) and its output is read only by ``DM``: becomes
  ``C(RESCALE(DM(x)))``; for a CONCAT, every input must be such a RESCALE, all with the same
  parameters, and one RESCALE of the concatenation replaces them.

Exact: a per-tensor RESCALE acts on each element alone, so it commutes with any operator each of
whose output elements is a copy of an input element (TRANSPOSE, RESHAPE, SLICE, TILE, REVERSE,
CONCAT). A PAD's padding value is rescaled with it: toward the writer the padding becomes
``RESCALE(pad)``, computed with TOSA's arithmetic (``_rescale.apply_rescale``); toward the reader
a value of the input type that the RESCALE maps to the padding value is searched for over the
whole 8/16-bit domain, and the move is made only if one exists.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator, Tensor
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    NARROW,
    OUTPUT_SCALING,
    Rescale,
    absorbs_operand,
    apply_rescale,
    read_rescale,
    single_reader,
    single_round,
)

# One data input (the first); every output element a copy of an input element.
ELEMENT_COPIES = ("TRANSPOSE", "RESHAPE", "SLICE", "TILE", "REVERSE")
DATA_MOVEMENT = (*ELEMENT_COPIES, "PAD", "CONCAT")
_DOMAIN = {
    "INT8": np.arange(-128, 128, dtype=np.int64),
    "INT16": np.arange(-32768, 32768, dtype=np.int64),
}


def data_inputs(dm: Operator) -> List[str]:
    """The tensors ``dm`` moves (a CONCAT's every input; the first input of the others)."""
    return list(dm.inputs) if dm.op == "CONCAT" else dm.inputs[:1]


def _rescaled_scalar(r: Rescale, value: int) -> Optional[int]:
    """``value`` through ``r`` as TOSA computes it; None if ``r`` is not modelled there."""
    if len(r.multiplier) != 1 or r.unsigned or not single_round(r):
        return None
    out = apply_rescale(
        np.array([value]), r.multiplier[0], r.shift[0], r.input_zp, r.output_zp, r.out_dtype
    )
    return None if out is None else int(out[0])


def _preimage(r: Rescale, value: int) -> Optional[int]:
    """A value of ``r``'s 8/16-bit input type that ``r`` maps to ``value``; None if none."""
    if r.in_dtype not in NARROW or len(r.multiplier) != 1 or r.unsigned or not single_round(r):
        return None
    domain = _DOMAIN[r.in_dtype]
    out = apply_rescale(domain, r.multiplier[0], r.shift[0], r.input_zp, r.output_zp, r.out_dtype)
    if out is None:
        return None
    hits = np.flatnonzero(out == value)
    return int(domain[hits[0]]) if len(hits) else None


def _pad_value(graph: Graph, pad: Operator) -> Optional[int]:
    arr = graph.const_array(pad.inputs[2]) if len(pad.inputs) > 2 else None
    return None if arr is None or arr.size != 1 else int(arr.ravel()[0])


class MoveRescaleThroughDataMovement(TosaRewrite):
    def apply(self, graph: Graph) -> int:
        changed = 0
        alive = {id(o) for o in graph.ops}
        producers, consumers = graph.producers(), graph.consumers()
        for op in list(graph.ops):
            if id(op) not in alive:
                continue
            r = read_rescale(graph, op)
            if r is None or r.per_channel:
                continue
            dm = producers.get(op.inputs[0])
            if self._toward_writer(graph, producers, consumers, r, dm):
                self._past_writer(graph, r, dm)
            elif not self._toward_reader(graph, consumers, r):
                continue
            changed += 1
            graph.remove_dead()  # a CONCAT's other RESCALEs
            alive = {id(o) for o in graph.ops}
            producers, consumers = graph.producers(), graph.consumers()
        return changed

    # ---- toward the writer ------------------------------------------------------------------
    @staticmethod
    def _toward_writer(graph, producers, consumers, r: Rescale, dm) -> bool:
        # An int32 result only: a RESCALE from 8/16 bits moves toward its reader, never back.
        if dm is None or dm.op not in DATA_MOVEMENT or r.in_dtype != "INT32":
            return False
        if single_reader(graph, consumers, dm.outputs[0]) is not r.op:
            return False
        xs = data_inputs(dm)
        if len(set(xs)) != len(xs):
            return False
        for x in xs:
            writer = producers.get(x)
            if writer is None or writer.op not in OUTPUT_SCALING:
                return False
            if single_reader(graph, consumers, x) is not dm:
                return False
        return dm.op != "PAD" or (
            _pad_value(graph, dm) is not None
            and _rescaled_scalar(r, _pad_value(graph, dm)) is not None
        )

    @staticmethod
    def _past_writer(graph: Graph, r: Rescale, dm: Operator) -> None:
        """``RESCALE(DM(x...))`` -> ``DM(RESCALE(x)...)``: ``DM`` writes the RESCALE's output."""
        op, y = r.op, r.op.outputs[0]
        dtype = graph.tensors[y].dtype
        if dm.op == "PAD":
            value = _rescaled_scalar(r, _pad_value(graph, dm))
            dm.inputs[2] = graph.add_const(op, f"{y}_pad_const", np.array([value]), dtype)
        xs = data_inputs(dm)
        # A CONCAT's other inputs get copies, placed with the RESCALE (its parameters are
        # produced before it; every x before DM, so before it too).
        outs = [graph.fresh_name(y)] + [graph.copy_before(op, op) for _ in xs[1:]]
        rescales = [op] + [graph.producers()[o] for o in outs[1:]]
        for x, out, rescale in zip(xs, outs, rescales):
            graph.tensors[out] = Tensor(out, graph.shape_of(x), dtype)
            rescale.inputs[0], rescale.outputs = x, [out]
        dm.inputs[: len(xs)] = outs
        del graph.tensors[dm.outputs[0]]
        dm.outputs = [y]
        # DM just after the RESCALE: its other inputs were produced before it, so before that.
        graph.ops = [o for o in graph.ops if o is not dm]
        graph.ops.insert(next(k for k, o in enumerate(graph.ops) if o is op) + 1, dm)

    # ---- toward the reader ------------------------------------------------------------------
    @staticmethod
    def _toward_reader(graph: Graph, consumers, r: Rescale) -> bool:
        dm = single_reader(graph, consumers, r.op.outputs[0])
        if dm is None or dm.op not in DATA_MOVEMENT or dm.inputs[0] != r.op.outputs[0]:
            return False
        reader = single_reader(graph, consumers, dm.outputs[0])
        if reader is None or not absorbs_operand(reader, r):
            return False
        producers = graph.producers()
        if dm.op == "CONCAT":
            rescales = [read_rescale(graph, producers.get(t)) for t in dm.inputs]
            same = [
                s is not None
                and single_reader(graph, consumers, s.op.outputs[0]) is dm
                and (s.in_dtype, s.out_dtype, s.multiplier, s.shift, s.input_zp, s.output_zp)
                == (r.in_dtype, r.out_dtype, r.multiplier, r.shift, r.input_zp, r.output_zp)
                and s.op.attr == r.op.attr
                for s in rescales
            ]
            if not all(same):
                return False
            xs = [s.op.inputs[0] for s in rescales]
        else:
            xs = [r.op.inputs[0]]
        pad_value = None
        if dm.op == "PAD":
            value = _pad_value(graph, dm)
            pad_value = None if value is None else _preimage(r, value)
            if pad_value is None:
                return False
        # x -> RESCALE -> t -> DM -> y  becomes  x -> DM -> mid -> RESCALE -> y.
        y, t = dm.outputs[0], r.op.outputs[0]
        mid = graph.fresh_name(y)
        graph.tensors[mid] = Tensor(mid, graph.shape_of(y), r.in_dtype)
        if pad_value is not None:
            dm.inputs[2] = graph.add_const(
                dm, f"{mid}_pad_const", np.array([pad_value]), r.in_dtype
            )
        dm.inputs[: len(xs)] = xs
        dm.outputs = [mid]
        r.op.inputs[0], r.op.outputs = mid, [y]
        del graph.tensors[t]
        # the RESCALE just after DM: its parameters were produced before it, so before DM too.
        graph.ops = [o for o in graph.ops if o is not r.op]
        graph.ops.insert(next(k for k, o in enumerate(graph.ops) if o is dm) + 1, r.op)
        return True
