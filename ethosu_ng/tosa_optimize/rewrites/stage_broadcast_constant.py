# SPDX-License-Identifier: BSD-3-Clause
"""A constant an elementwise operator broadcasts from flash -> a copy of it made at run time in
the arena, by one small ADD.

Where Vela keeps constants in another memory than the feature maps (memory mode
``Shared_Sram``: constants in flash on AXI1, the arena in SRAM), an ADD, SUB or MUL that
broadcasts a constant operand (a per-channel mean, scale or bias, ``[1, 1, 1, C]`` against
``[1, H, W, C]``) reads it from flash again for every block it computes; regor does not move such
a constant to SRAM first (``Scheduler::MoveConstantData`` is disabled in Vela 5.1). Vela's
estimate makes the operator flash-bound: a batch norm Vela could not fold into a convolution
(repvgg's identity branch: SUB, MUL, MUL, ADD of per-channel constants) cost 1,204,224 cycles per
operator on a ``[1, 56, 56, 48]`` tensor on ethos-u55-128, where its NPU work is 150,528 to
225,792. Upstream's lowering escapes it for one of the two MULs only by accident: its
``rsqrt(var + eps)`` is computed on the NPU, so that operand lives in the arena.

The operand is an 8/16-bit constant (through RESHAPEs) whose RESCALE to int32 Vela folds into the
operator as an operand scale. The rewrite gives that RESCALE a run-time copy of the constant
instead: ``RESCALE(ADD(RESCALE(c), RESCALE(zero)))``, unit scales and the constant's zero point
(``c - zp + 0``, back to ``c``), which Vela folds into one elementwise operation over the
constant's few elements. Exact on every value of the constant's type.

Not applied: to a scalar constant (Vela passes a one-element operand as an immediate, no memory
read), to an operand the operator does not broadcast, to an operand whose RESCALE Vela does not
fold (the operator would then read a run-time int32 tensor, which Vela on Ethos-U55 splits the
operator for), and wherever Vela does not estimate the operator cheaper with the copy. Whether a
broadcast read is flash-bound depends on Vela's block choice, operand order and burst lengths
(drawn graphs: some operators are 8x faster with the copy, others already compute-bound and a
few percent slower), so the rewrite asks Vela: it compiles the operator alone (its operand
RESCALEs and its result RESCALE, the constant replaced by a fixed pattern of the same type and
shape) with and without the copy, under the partition's compile spec, and applies it where the
estimated cycles (``cycles_total``, memory-bound time included) are lower. One probe per
distinct operator signature per process, all of a graph's in one probe graph that Vela
compiles twice (as is and with every candidate staged; its per-layer table gives each
operator's cycles).
tests/test_stage_broadcast_constant.py checks exactness and the estimate over drawn shapes,
operators, positions and memory modes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator, Tensor
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._probe import Decisions, copy_op, cycles_by_prefix
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    OPERAND_SCALING,
    Rescale,
    absorbs_operand,
    read_rescale,
)
from ethosu_ng.tosa_optimize.rewrites.merge_consecutive_rescales import MergeConsecutiveRescales
from ethosu_ng.tosa_optimize.rewrites.split_shared_rescale import SplitSharedRescale

if TYPE_CHECKING:
    from ethosu_ng.compile_spec import EthosUNGCompileSpec

# Ops a constant may pass through and stay a constant to Vela (it folds them).
_CONSTANT_PATH = frozenset({"RESHAPE"})
_LITTLE_ENDIAN = {"INT8": "<i1", "INT16": "<i2"}
PROBE = "stage_broadcast_constant_probe"


def _unit(graph: Graph, anchor: Operator, x: str, out_dtype: str, in_zp: int, out_zp: int) -> str:
    """A unit-scale RESCALE of ``x`` to ``out_dtype`` (``anchor``'s rounding) before ``anchor``."""
    y = graph.fresh_name(x + "_staged")
    graph.tensors[y] = Tensor(y, graph.shape_of(x), out_dtype)
    attr = dict(anchor.attr, per_channel=False)
    op = Operator("RESCALE", [x], [y], attr, source=anchor.source)
    graph.insert_before(anchor, op)
    op.inputs += [
        graph.add_const(op, y + "_multiplier", np.array([1 << 30]), "INT32"),
        graph.add_const(op, y + "_shift", np.array([30]), "INT8"),
        graph.add_const(op, y + "_input_zp", np.array([in_zp]), graph.tensors[x].dtype),
        graph.add_const(op, y + "_output_zp", np.array([out_zp]), out_dtype),
    ]
    return y


def stage(graph: Graph, r: Rescale) -> None:
    """``r`` (an operand RESCALE of an 8/16-bit constant) reads a run-time copy of it instead:
    ``RESCALE(ADD(RESCALE(c), RESCALE(zero)))``, unit scales around the constant's zero point."""
    rescale, c, zp = r.op, r.op.inputs[0], r.input_zp
    up = _unit(graph, rescale, c, "INT32", zp, 0)
    zeros = np.full([1] * len(graph.shape_of(c)), zp)
    zero = _unit(
        graph, rescale, graph.add_const(rescale, c + "_zero", zeros, r.in_dtype), "INT32", zp, 0
    )
    total = graph.fresh_name(c + "_staged_sum")
    graph.tensors[total] = Tensor(total, graph.shape_of(c), "INT32")
    graph.insert_before(rescale, Operator("ADD", [up, zero], [total], source=rescale.source))
    rescale.inputs[0] = _unit(graph, rescale, total, r.in_dtype, 0, zp)


def _constant_source(graph: Graph, producers: Dict[str, Operator], name: str) -> bool:
    """``name`` is a constant, or a RESHAPE chain of one (what Vela folds to a constant)."""
    for _ in range(16):
        if name in graph.shapes or graph.is_constant(name):
            return True
        p = producers.get(name)
        if p is None or p.op not in _CONSTANT_PATH:
            return False
        name = p.inputs[0]
    return False


def _folding_operand(graph: Graph, producers, op: Operator, k: int) -> Optional[Rescale]:
    """Operand ``k`` of ``op``: a RESCALE Vela folds into ``op`` as an operand scale."""
    p = producers.get(op.inputs[k])
    r = read_rescale(graph, p) if p is not None else None
    return r if absorbs_operand(op, r) else None


@dataclass(frozen=True)
class _Candidate:
    op: Operator
    rescales: Tuple[Rescale, Rescale]
    k: int  # the constant operand
    reader: Optional[Operator]  # the RESCALE of the result, if it is the only reader


def _add_probe(graph: Graph, g: Graph, c: _Candidate, prefix: str) -> str:
    """Candidate ``c``'s operator alone into ``g``: its constant operand a fixed pattern of the
    constant's type and shape, the other operand a graph input, both through their RESCALEs,
    the result through its RESCALE reader if it has one. Returns the constant's RESCALE output."""
    operands = []
    for j, r in enumerate(c.rescales):
        src = r.op.inputs[0]
        name, shape, dtype = prefix + src, graph.shape_of(src), r.in_dtype
        if j == c.k:
            pattern = np.arange(math.prod(shape)) % 251 - 125
            raw = np.asarray(pattern, _LITTLE_ENDIAN[dtype]).tobytes()
            g.tensors[name] = Tensor(name, shape, dtype, list(raw))
            g.ops.append(Operator("CONST", [], [name]))
        else:
            g.tensors[name] = Tensor(name, shape, dtype)
            g.inputs.append(name)
        operands.append(copy_op(graph, g, r.op, [name], prefix))
    y = copy_op(graph, g, c.op, operands, prefix)
    if c.reader is not None:
        y = copy_op(graph, g, c.reader, [y], prefix)
    g.outputs.append(y)
    return operands[c.k]


def _signature(graph: Graph, c: _Candidate, spec: EthosUNGCompileSpec) -> tuple:
    """What Vela's estimate of a probe depends on: the operator, shapes, types, which operand is
    the constant, unit or not scales, the result's type, the compile spec (not the values)."""
    operands = tuple(
        (tuple(graph.shape_of(r.op.inputs[0])), r.in_dtype, r.is_unit_scale, r.input_zp != 0)
        for r in c.rescales
    )
    out = tuple(graph.shape_of(c.op.outputs[0]))
    result = None if c.reader is None else graph.tensors[c.reader.outputs[0]].dtype
    return (c.op.op, out, operands, c.k, result, spec)


# signature -> Vela estimates the operator cheaper with its constant staged (per process).
_DECIDED = Decisions()


def decide(graph: Graph, candidates: List[_Candidate], spec: EthosUNGCompileSpec) -> List[bool]:
    """For each candidate, whether Vela estimates its operator cheaper with the constant staged.
    The undecided signatures are probed together: one graph holding each operator alone,
    compiled once as is and once with every constant staged."""
    keys = [_signature(graph, c, spec) for c in candidates]
    todo = _DECIDED.undecided(keys, candidates)
    if todo:
        probe = Graph({}, {}, [], [], [], graph.version)
        prefixes = [f"p{n}_" for n in range(len(todo))]
        constants = [_add_probe(graph, probe, c, p) for c, p in zip(todo.values(), prefixes)]
        before = cycles_by_prefix(probe, spec, prefixes, PROBE)
        producers = probe.producers()
        for name in constants:
            stage(probe, read_rescale(probe, producers[name]))
        _DECIDED.record(list(todo), before, cycles_by_prefix(probe, spec, prefixes, PROBE))
    return [_DECIDED[key] for key in keys]


class StageBroadcastConstant(TosaRewrite):
    # After the rescale rewrites: a RESCALE they split or merge is then the one Vela folds.
    runs_after = (SplitSharedRescale, MergeConsecutiveRescales)

    def apply(self, graph: Graph) -> int:
        from ethosu_ng.vela.config import constants_apart_from_feature_maps

        spec = self.spec
        if spec is None or not constants_apart_from_feature_maps(spec.memory_mode):
            return 0
        candidates = self.candidates(graph)
        chosen = [c for c, ok in zip(candidates, decide(graph, candidates, spec)) if ok]
        for c in chosen:
            stage(graph, c.rescales[c.k])
        return len(chosen)

    @staticmethod
    def candidates(graph: Graph) -> List[_Candidate]:
        producers, consumers = graph.producers(), graph.consumers()
        out: List[_Candidate] = []
        for op in graph.ops:
            if op.op not in OPERAND_SCALING or op.inputs[0] == op.inputs[1]:
                continue
            rescales = [_folding_operand(graph, producers, op, k) for k in (0, 1)]
            if rescales[0] is None or rescales[1] is None:
                continue
            constant = [_constant_source(graph, producers, r.op.inputs[0]) for r in rescales]
            if constant[0] == constant[1]:
                continue  # no constant, or nothing of the operator runs per inference
            k = constant.index(True)
            c = rescales[k].op.inputs[0]
            elems = math.prod(graph.shape_of(c))
            if elems == 1 or elems >= math.prod(graph.shape_of(op.outputs[0])):
                continue
            if len(consumers.get(rescales[k].op.outputs[0], [])) != 1:
                continue  # a shared RESCALE: SplitSharedRescale gives each reader its own
            readers = consumers.get(op.outputs[0], [])
            reader = readers[0] if len(readers) == 1 and readers[0].op == "RESCALE" else None
            out.append(_Candidate(op, (rescales[0], rescales[1]), k, reader))
        return out
