# SPDX-License-Identifier: BSD-3-Clause
"""Asking Vela what a rewrite costs: operators copied alone into a probe graph, compiled, and
Vela's per-layer cycles summed per operator.

A rewrite whose gain depends on Vela's choices (block sizes, burst lengths, how it lowers an
operator on each target) cannot be decided by a rule that holds for every shape. Such a rewrite
copies each candidate operator alone into one probe graph (names prefixed per candidate),
compiles it as is and with the rewrite applied, and keeps the rewrite where Vela's estimate
(``cycles``: memory-bound time included) is lower. Decisions are cached per signature (what the
estimate depends on), so a graph's repeated blocks cost one probe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

from ethosu_ng.tosa_optimize.graph import Graph, Operator, ShapeValue, Tensor, write

if TYPE_CHECKING:
    from ethosu_ng.compile_spec import EthosUNGCompileSpec


def copy_op(src: Graph, dst: Graph, op: Operator, inputs: List[str], prefix: str) -> str:
    """``op`` into ``dst`` (names prefixed) reading ``inputs`` then its constant parameters."""
    params = []
    for name in op.inputs[len(inputs) :]:
        new = prefix + name
        params.append(new)
        if new in dst.tensors or new in dst.shapes:
            continue
        if name in src.shapes:
            v = src.shapes[name]
            dst.shapes[new] = ShapeValue(new, v.rank, v.data)
            dst.ops.append(Operator("CONST_SHAPE", [], [new]))
        else:
            t = src.tensors[name]
            dst.tensors[new] = Tensor(new, list(t.shape), t.dtype, t.data)
            dst.ops.append(Operator("CONST", [], [new]))
    y = prefix + op.outputs[0]
    dst.tensors[y] = Tensor(y, src.shape_of(op.outputs[0]), src.tensors[op.outputs[0]].dtype)
    dst.ops.append(Operator(op.op, inputs + params, [y], dict(op.attr)))
    return y


def cycles_by_prefix(
    probe: Graph, spec: EthosUNGCompileSpec, prefixes: List[str], partition: str
) -> Optional[List[int]]:
    """Vela's cycles (memory-bound time included) per candidate, by the prefix of the output of
    the TOSA operator each scheduled layer came from; None if Vela fails."""
    from ethosu_ng.vela.compiler import VelaError, compile_tosa

    try:
        layers = compile_tosa(write(probe), spec, partition).layers
    except VelaError:
        return None
    ops = probe.ops  # written in this order: a layer's tosa_index indexes it
    out = [0] * len(prefixes)
    for layer in layers:
        if layer.tosa_index is None or not 0 <= layer.tosa_index < len(ops):
            return None
        name = ops[layer.tosa_index].outputs[0]
        owner = [n for n, p in enumerate(prefixes) if name.startswith(p)]
        if len(owner) != 1:
            return None
        out[owner[0]] += layer.cycles
    return out


class Decisions:
    """Signature -> whether Vela estimates the rewritten operator cheaper (per process)."""

    MAX = 4096

    def __init__(self):
        self._known: Dict[tuple, bool] = {}

    def __getitem__(self, key: tuple) -> bool:
        return self._known[key]

    def undecided(self, keys: List[tuple], candidates: List) -> Dict[tuple, object]:
        """The first candidate of each signature not decided yet, by signature."""
        todo: Dict[tuple, object] = {}
        for key, c in zip(keys, candidates):
            if key not in self._known and key not in todo:
                todo[key] = c
        return todo

    def record(self, keys: List[tuple], before: Optional[List[int]], after: Optional[List[int]]):
        """Cheaper where both compiles succeeded and ``after`` is below ``before``."""
        if len(self._known) + len(keys) > self.MAX:
            self._known.clear()
        for n, key in enumerate(keys):
            self._known[key] = before is not None and after is not None and after[n] < before[n]
