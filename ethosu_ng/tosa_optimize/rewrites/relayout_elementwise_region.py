# SPDX-License-Identifier: BSD-3-Clause
"""Run a whole element-wise region in the layout of the transposes around it.

Upstream brackets every convolution of an NCHW model with a transpose into NHWC and one back, so
the element-wise operators between convolutions (a residual add, a layer scale, an activation)
run on NCHW tensors. ``SinkTransposeToCancel`` moves a transpose down a chain of single readers;
a region with fan-out (a residual read by the add and by the next block's convolutions, the two
branches of a RepMixer) stops it, and each of its transposes stays.

Here the region is taken whole: the element-wise operators (``_layout.elementwise_inputs``) and
reductions (a group norm's mean and variance; the reduced axis is permuted with the layout)
connected to a TRANSPOSE ``t = transpose(x, p)`` through their data inputs and outputs, both
ways. It runs in ``x``'s layout instead when every data input that enters it from outside is

- ``transpose(z, p)`` (it reads ``z``; the transpose goes when nothing else reads it),
- a constant, or a reshape of one (stored transposed, broadcast dimensions with it), or
  all-ones in shape;

and every reader of its tensors outside it is a TRANSPOSE (``transpose(y, q)`` becomes
``transpose(y', compose(p, q))``, gone when that is the identity), and no tensor of it is a
graph output. Nothing is added. Every element-wise operator computes each element from the
elements at the same index, a reduction the same sums over the same elements, so the result is
the same values in the other order: bit-exact.

Whether it pays is Vela's to say: channels-last makes per-channel parameters broadcast along the
innermost dimension (FastViT at 64x64 on U85: 1.71 M -> 1.05 M NPU cycles), but a region with a
few channels under a wide row runs dearer channels-last. So, given the compile spec, each region
is copied into a probe graph (``_probe``) with the operators that write its entering transposes
and read its leaving ones, compiled as it is and relaid out, and relaid out in the graph only
where Vela estimates it cheaper; decisions are cached per region and spec. Without a spec it
is applied wherever it removes a transpose.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator, Tensor
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import (
    compose,
    elementwise_inputs,
    inverse,
    is_identity,
    perm_of,
    permuted,
)
from ethosu_ng.tosa_optimize.rewrites._probe import Decisions, copy_op, cycles_by_prefix
from ethosu_ng.tosa_optimize.rewrites.sink_transpose_to_cancel import SinkTransposeToCancel

if TYPE_CHECKING:
    from ethosu_ng.compile_spec import EthosUNGCompileSpec

logger = logging.getLogger(__name__)

# Operators in one region at most (a MetaFormer block's element-wise ops are a few dozen).
MAX_REGION = 1024


@dataclass
class _Region:
    perm: Tuple[int, ...]
    ops: List[Operator]  # in graph order
    removed: int  # transposes that go


class RelayoutElementwiseRegion(TosaRewrite):
    runs_after = (SinkTransposeToCancel,)  # chains first; regions with fan-out are left here

    def apply(self, graph: Graph) -> int:
        consumers, producers = graph.consumers(), graph.producers()
        found: List[Tuple[Operator, _Region]] = []
        seen: Set[frozenset] = set()
        for top in graph.ops:
            if top.op != "TRANSPOSE":
                continue
            region = _region(graph, consumers, producers, top)
            if region is None:
                continue
            key = frozenset(id(o) for o in region.ops)
            if key not in seen:
                seen.add(key)
                found.append((top, region))
        if not found:
            return 0
        if self.spec is not None:
            keep = decide(graph, [r for _, r in found], self.spec)
            found = [f for f, ok in zip(found, keep) if ok]
        changed = 0
        for top, _ in found:
            # An earlier relayout may have changed this region's surroundings: look again.
            if changed:
                consumers, producers = graph.consumers(), graph.producers()
            if top.outputs[0] not in consumers and top.outputs[0] not in graph.outputs:
                continue  # gone with an earlier region
            region = _region(graph, consumers, producers, top)
            if region is not None:
                _relayout(graph, consumers, producers, region)
                changed += 1
        return changed


# Reductions keep their rank (the reduced axis becomes 1): in the other layout they reduce the
# permuted axis.
REDUCTIONS = (
    "REDUCE_SUM",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "REDUCE_PRODUCT",
    "REDUCE_ALL",
    "REDUCE_ANY",
)


def _data_inputs(op: Operator) -> Optional[Tuple[int, ...]]:
    """The inputs of a region operator that carry data in the region's layout; None for an
    operator a region cannot hold."""
    if op.op in REDUCTIONS and "axis" in op.attr:
        return (0,)
    return elementwise_inputs(op)


def _joinable(op: Operator, rank: int, graph: Graph) -> bool:
    return (
        _data_inputs(op) is not None
        and len(op.outputs) == 1
        and len(graph.shape_of(op.outputs[0])) == rank
    )


def _region(graph, consumers, producers, top) -> Optional[_Region]:
    """The region reached from ``top``, if it qualifies."""
    perm = perm_of(top)
    rank = len(perm)
    if is_identity(perm):
        return None
    todo = [r for r in consumers.get(top.outputs[0], []) if _joinable(r, rank, graph)]
    members: Dict[int, Operator] = {}
    while todo:
        op = todo.pop()
        if id(op) in members:
            continue
        if len(members) >= MAX_REGION:
            return None
        members[id(op)] = op
        todo += [r for r in consumers.get(op.outputs[0], []) if _joinable(r, rank, graph)]
        for j in _data_inputs(op):
            src = producers.get(op.inputs[j])
            if src is not None and _joinable(src, rank, graph):
                todo.append(src)
    ops = list(members.values())
    if not ops:
        return None
    entering: Dict[int, Operator] = {}  # transposes the region reads from outside
    for op in ops:
        for j in _data_inputs(op):
            t = op.inputs[j]
            src = producers.get(t)
            if src is not None and id(src) in members:
                continue
            if all(d == 1 for d in graph.shape_of(t)):
                continue
            if _constant_value(graph, producers, t) is not None:
                continue
            if src is not None and src.op == "TRANSPOSE" and perm_of(src) == perm:
                entering[id(src)] = src
                continue
            return None
    removed = 0
    for src in entering.values():
        out = src.outputs[0]
        if out not in graph.outputs and all(
            id(r) in members and _reads_only_as_data(r, out) for r in consumers.get(out, [])
        ):
            removed += 1
    for op in ops:
        out = op.outputs[0]
        if out in graph.outputs:
            return None
        for r in consumers.get(out, []):
            if id(r) in members:
                if not _reads_only_as_data(r, out):
                    return None
                continue
            if r.op != "TRANSPOSE":
                return None
            if is_identity(compose(perm, perm_of(r))):
                if r.outputs[0] in graph.outputs:
                    return None
                removed += 1
    if removed == 0:
        return None
    order = {id(o): k for k, o in enumerate(graph.ops)}
    return _Region(perm, sorted(ops, key=lambda o: order[id(o)]), removed)


def _constant_value(graph: Graph, producers, name: str) -> Optional[np.ndarray]:
    """The value of a constant tensor, or of a RESHAPE of one (how upstream writes a per-channel
    parameter: ``[C, 1, 1]`` reshaped to ``[1, C, 1, 1]``); None for anything else."""
    src = producers.get(name)
    if src is None:
        return None
    if src.op == "CONST":
        return graph.const_array(name)
    if src.op == "RESHAPE":
        arr = graph.const_array(src.inputs[0])
        return None if arr is None else arr.reshape(graph.shape_of(name))
    return None


def _reads_only_as_data(op: Operator, name: str) -> bool:
    data = _data_inputs(op) or ()
    return all(j in data for j, t in enumerate(op.inputs) if t == name)


def _relayout(graph: Graph, consumers, producers, region: _Region) -> None:
    perm, inv = region.perm, inverse(region.perm)
    inside = {id(o) for o in region.ops}
    for op in region.ops:
        inputs = list(op.inputs)
        for j in _data_inputs(op):
            t = op.inputs[j]
            src = producers.get(t)
            if (src is not None and id(src) in inside) or all(d == 1 for d in graph.shape_of(t)):
                continue
            if src.op == "TRANSPOSE":
                inputs[j] = src.inputs[0]
            else:
                arr = np.transpose(_constant_value(graph, producers, t), inv)
                inputs[j] = graph.add_const(op, t, arr, graph.tensors[t].dtype)
        op.inputs = inputs
        if op.op in REDUCTIONS:
            op.attr = {**op.attr, "axis": perm[int(op.attr["axis"])]}
        out = graph.tensors[op.outputs[0]]
        out.shape = permuted(out.shape, inv)
    dropped: List[Operator] = []
    for op in region.ops:
        for r in consumers.get(op.outputs[0], []):
            if id(r) in inside:
                continue
            q = compose(perm, perm_of(r))
            if is_identity(q):
                graph.replace_uses(r.outputs[0], op.outputs[0])
                dropped.append(r)
            else:
                r.attr = {**r.attr, "perms": list(q)}
    graph.ops = [o for o in graph.ops if all(o is not d for d in dropped)]
    graph.remove_dead()


# region signature -> Vela estimates the relaid-out region cheaper (per process).
_DECIDED = Decisions()
PROBE = "relayout_elementwise_region_probe"


def _signature(graph: Graph, region: _Region, spec: EthosUNGCompileSpec) -> tuple:
    """What Vela's estimate depends on: the operators, their shapes and types, the spec."""
    return (
        spec,
        region.perm,
        tuple(
            (o.op, tuple(graph.shape_of(o.outputs[0])), graph.tensors[o.outputs[0]].dtype)
            for o in region.ops
        ),
    )


def decide(graph: Graph, regions: List[_Region], spec: EthosUNGCompileSpec) -> List[bool]:
    """For each region, whether Vela estimates it cheaper relaid out; each undecided signature
    probed in its own graph (a region is tens to hundreds of operators)."""
    keys = [_signature(graph, r, spec) for r in regions]
    for key, region in _DECIDED.undecided(keys, regions).items():
        before = after = None
        try:
            probe, top = _probe_graph(graph, region)
            before = cycles_by_prefix(probe, spec, [""], PROBE)
            consumers, producers = probe.consumers(), probe.producers()
            relaid = _region(probe, consumers, producers, top) if top is not None else None
            if relaid is not None:
                _relayout(probe, consumers, producers, relaid)
                after = cycles_by_prefix(probe, spec, [""], PROBE)
        except Exception as e:  # a probe that cannot be built or written: leave the region
            logger.debug("region probe failed (%s: %s); the region keeps its layout", type(e), e)
        _DECIDED.record([key], before, after)
    return [_DECIDED[key] for key in keys]


def _probe_graph(graph: Graph, region: _Region) -> Tuple[Graph, Optional[Operator]]:
    """The region alone: its operators and constants, its entering transposes written by a copy
    of their producer (so Vela may fold a transpose into that write, as in the graph; the written
    tensor is a probe output where something else reads it too), its leaving transposes read by
    a copy of their reader. Returns the probe and the copy of one
    entering transpose (where the region is looked for again)."""
    probe = Graph({}, {}, [], [], [], graph.version)
    producers, consumers = graph.producers(), graph.consumers()
    inside = {id(o) for o in region.ops}
    made: Dict[str, str] = {}  # graph tensor -> probe tensor (the same name)

    def fresh_input(name: str) -> str:
        if name not in made:
            probe.tensors[name] = Tensor(name, graph.shape_of(name), graph.tensors[name].dtype)
            probe.inputs.append(name)
            made[name] = name
        return made[name]

    def written(name: str) -> str:
        """``name`` in the probe: a constant copied, or written by a copy of its producer where
        that reads one tensor (a convolution, a RESCALE, a RESHAPE), or a graph input."""
        if name in made:
            return made[name]
        src = producers.get(name)
        if src is not None and src.op == "CONST":
            t = graph.tensors[name]
            probe.tensors[name] = Tensor(name, list(t.shape), t.dtype, t.data)
            probe.ops.append(Operator("CONST", [], [name]))
            made[name] = name
        elif src is not None and src.op == "RESHAPE" and _reads_one_tensor(graph, src):
            made[name] = copy_op(graph, probe, src, [written(src.inputs[0])], "")
        elif src is not None and len(src.outputs) == 1 and _reads_one_tensor(graph, src):
            made[name] = copy_op(graph, probe, src, [fresh_input(src.inputs[0])], "")
        else:
            return fresh_input(name)
        return made[name]

    top = None
    for op in region.ops:
        data = []
        for j in _data_inputs(op):
            t = op.inputs[j]
            src = producers.get(t)
            entering = src is not None and src.op == "TRANSPOSE" and id(src) not in inside
            if entering and t not in made:
                z = written(src.inputs[0])
                made[t] = copy_op(graph, probe, src, [z], "")
                top = top or probe.ops[-1]
                # Read elsewhere too, it is written as it is: Vela cannot fold the transpose
                # into that write.
                if (
                    z not in probe.outputs
                    and z not in probe.inputs
                    and any(
                        r.op != "TRANSPOSE" or perm_of(r) != region.perm
                        for r in consumers.get(src.inputs[0], [])
                    )
                ):
                    probe.outputs.append(z)
            data.append(made[t] if t in made else written(t))
        made[op.outputs[0]] = copy_op(graph, probe, op, data, "")
    for op in region.ops:
        for r in consumers.get(op.outputs[0], []):
            if id(r) in inside:
                continue
            y = copy_op(graph, probe, r, [made[op.outputs[0]]], "")
            reader = next(iter(consumers.get(r.outputs[0], [])), None)
            if (
                reader is not None
                and reader.inputs[0] == r.outputs[0]
                and _reads_one_tensor(graph, reader)
            ):
                y = copy_op(graph, probe, reader, [y], "")
            probe.outputs.append(y)
    return probe, top


def _reads_one_tensor(graph: Graph, op: Operator) -> bool:
    """Its first input is its only one that is not a constant or a shape."""
    return bool(op.inputs) and all(
        t in graph.shapes or graph.tensors[t].data is not None for t in op.inputs[1:]
    )
