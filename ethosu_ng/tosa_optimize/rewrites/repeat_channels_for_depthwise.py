# SPDX-License-Identifier: BSD-3-Clause
"""A DEPTHWISE_CONV2D with channel multiplier M > 1 -> a 1x1 CONV2D that repeats each input
channel M times, then a DEPTHWISE_CONV2D with multiplier 1.

A depthwise convolution whose output has M channels per input channel (FastViT's and
RepViT's stride-2 downsampling, ``Conv2d(C, 2C, k, groups=C)``; MobileOne's ``final_conv``) is
lowered by Vela 5.1 for Ethos-U85 as M depthwise passes whose results are interleaved by seven
Transpose layers: on ``[1, 56, 56, 48]``, 7x7 stride 2, M = 2, 802,264 of 956,692 NPU cycles
move data. The same convolution reading a copy of its input in which channel ``c`` is repeated
M times (channel ``c * M + m``) has one weight per output channel: a multiplier-1 depthwise
convolution over C * M channels, whose weights ``[KH, KW, C, M]`` are the same bytes as
``[KH, KW, C * M, 1]``. The copy is a 1x1 CONV2D with 0/1 weights and a unit RESCALE back to the
input's type and zero point (``(x - zp) * 1`` then ``+ zp``), which Vela folds into the
convolution: 225,608 NPU cycles for the pair on the shape above.

Exact: the new depthwise convolution reads, for output channel ``c * M + m``, the values the
original read for it, with the same zero points, bias and accumulator; the copy reproduces its
input exactly (int8 and int16 inputs; a 48-bit accumulator is rescaled with a 16-bit unit scale,
as TOSA requires).

Whether it pays depends on the target (Ethos-U55 runs the interleave cheaply and the 1x1
convolution dearly: 454,524 cycles before, 601,571 after on the shape above) and on the shape
(the copy's MACs grow with C squared, the transposes with C), so the rewrite asks Vela
(``_probe``): each distinct convolution alone, with its result's RESCALE, compiled as is and
rewritten under the partition's compile spec. Depthwise convolutions reading one tensor with the
same multiplier share one copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Tuple

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator, Tensor
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._probe import Decisions, copy_op, cycles_by_prefix

if TYPE_CHECKING:
    from ethosu_ng.compile_spec import EthosUNGCompileSpec

PROBE = "repeat_channels_for_depthwise_probe"
_INPUT_DTYPES = ("INT8", "INT16")
# A 48-bit accumulator takes a 16-bit RESCALE multiplier (TOSA: no scale32 from int48).
_UNIT_SCALE = {"INT32": (True, 1 << 30, 30, "INT32"), "INT48": (False, 1 << 14, 14, "INT16")}


@dataclass(frozen=True)
class _Candidate:
    op: Operator  # the DEPTHWISE_CONV2D
    reader: Operator  # the RESCALE of its result
    channels: int
    multiplier: int
    input_zp: int


def _zeros(graph: Graph, anchor: Operator, base: str, n: int, dtype: str) -> str:
    if dtype != "INT48":
        return graph.add_const(anchor, base, np.zeros(n, dtype=np.int64), dtype)
    name = graph.fresh_name(base)  # 6 little-endian bytes a value
    graph.tensors[name] = Tensor(name, [n], dtype, [0] * 6 * n)
    graph.insert_before(anchor, Operator("CONST", [], [name], source=anchor.source))
    return name


def repeated_input(graph: Graph, c: _Candidate) -> str:
    """Before ``c.op``: its input with each channel repeated ``c.multiplier`` times."""
    dw = c.op
    x, acc = dw.inputs[0], graph.tensors[dw.outputs[0]].dtype
    in_dtype, shape = graph.tensors[x].dtype, graph.shape_of(x)
    wide = c.channels * c.multiplier
    summed = graph.fresh_name(x + "_repeat_acc")
    graph.tensors[summed] = Tensor(summed, shape[:-1] + [wide], acc)
    conv_attr = {
        "acc_type": dw.attr["acc_type"],
        "dilation": [1, 1],
        "local_bound": False,
        "pad": [0, 0, 0, 0],
        "stride": [1, 1],
    }
    conv = Operator("CONV2D", [x], [summed], conv_attr, source=dw.source)
    graph.insert_before(dw, conv)
    ones = np.zeros((wide, 1, 1, c.channels), dtype=np.int64)
    for m in range(c.multiplier):
        ones[np.arange(c.channels) * c.multiplier + m, 0, 0, np.arange(c.channels)] = 1
    conv.inputs += [
        graph.add_const(conv, x + "_repeat_weight", ones, "INT8"),
        _zeros(graph, conv, x + "_repeat_bias", wide, graph.tensors[dw.inputs[2]].dtype),
        graph.add_const(conv, x + "_repeat_input_zp", np.array([c.input_zp]), in_dtype),
        graph.add_const(conv, x + "_repeat_weight_zp", np.array([0]), "INT8"),
    ]
    y = graph.fresh_name(x + "_repeat")
    graph.tensors[y] = Tensor(y, shape[:-1] + [wide], in_dtype)
    scale32, multiplier, shift, mult_dtype = _UNIT_SCALE[acc]
    attr = dict(c.reader.attr, per_channel=False, scale32=scale32)
    attr.update(input_unsigned=False, output_unsigned=False)
    rescale = Operator("RESCALE", [summed], [y], attr, source=dw.source)
    graph.insert_before(dw, rescale)
    rescale.inputs += [
        graph.add_const(rescale, y + "_multiplier", np.array([multiplier]), mult_dtype),
        graph.add_const(rescale, y + "_shift", np.array([shift]), "INT8"),
        _zeros(graph, rescale, y + "_input_zp", 1, acc),
        graph.add_const(rescale, y + "_output_zp", np.array([c.input_zp]), in_dtype),
    ]
    return y


def rewrite(graph: Graph, c: _Candidate, repeated: str) -> None:
    """``c.op`` reads ``repeated`` with its weights as ``[KH, KW, C * M, 1]`` (the same bytes)."""
    dw = c.op
    w = graph.tensors[dw.inputs[1]]
    kh, kw = w.shape[0], w.shape[1]
    name = graph.fresh_name(dw.inputs[1] + "_multiplier1")
    graph.tensors[name] = Tensor(name, [kh, kw, c.channels * c.multiplier, 1], w.dtype, w.data)
    graph.insert_before(dw, Operator("CONST", [], [name], source=dw.source))
    dw.inputs[0], dw.inputs[1] = repeated, name


def candidates(graph: Graph) -> List[_Candidate]:
    consumers = graph.consumers()
    out = []
    for op in graph.ops:
        if op.op != "DEPTHWISE_CONV2D" or len(op.inputs) != 5:
            continue
        x, w, izp = op.inputs[0], op.inputs[1], graph.const_array(op.inputs[3])
        if graph.tensors[x].dtype not in _INPUT_DTYPES or izp is None or izp.size != 1:
            continue
        shape = graph.tensors[w].shape
        if not graph.is_constant(w) or len(shape) != 4 or shape[3] < 2:
            continue
        if graph.tensors[op.outputs[0]].dtype not in _UNIT_SCALE:
            continue
        readers = consumers.get(op.outputs[0], [])
        if len(readers) != 1 or readers[0].op != "RESCALE" or op.outputs[0] in graph.outputs:
            continue
        out.append(_Candidate(op, readers[0], shape[2], shape[3], int(izp.ravel()[0])))
    return out


def _signature(graph: Graph, c: _Candidate, spec: EthosUNGCompileSpec) -> tuple:
    """What Vela's estimate depends on: shapes, types, the convolution's geometry, the spec."""
    dw = c.op
    geometry = tuple(tuple(dw.attr.get(k) or ()) for k in ("pad", "stride", "dilation"))
    return (
        tuple(graph.shape_of(dw.inputs[0])),
        graph.tensors[dw.inputs[0]].dtype,
        tuple(graph.shape_of(dw.inputs[1])),
        graph.tensors[c.reader.outputs[0]].dtype,
        geometry,
        spec,
    )


# signature -> Vela estimates the rewritten convolution cheaper (per process).
_DECIDED = Decisions()


def decide(graph: Graph, found: List[_Candidate], spec: EthosUNGCompileSpec) -> List[bool]:
    """For each candidate, whether Vela estimates it cheaper rewritten; the undecided
    signatures probed together, each convolution alone in one probe graph."""
    keys = [_signature(graph, c, spec) for c in found]
    todo = _DECIDED.undecided(keys, found)
    if todo:
        probe = Graph({}, {}, [], [], [], graph.version)
        prefixes = [f"p{n}_" for n in range(len(todo))]
        for c, prefix in zip(todo.values(), prefixes):
            x = prefix + c.op.inputs[0]
            probe.tensors[x] = Tensor(
                x, graph.shape_of(c.op.inputs[0]), graph.tensors[c.op.inputs[0]].dtype
            )
            probe.inputs.append(x)
            y = copy_op(graph, probe, c.op, [x], prefix)
            probe.outputs.append(copy_op(graph, probe, c.reader, [y], prefix))
        before = cycles_by_prefix(probe, spec, prefixes, PROBE)
        for c in candidates(probe):
            rewrite(probe, c, repeated_input(probe, c))
        _DECIDED.record(list(todo), before, cycles_by_prefix(probe, spec, prefixes, PROBE))
    return [_DECIDED[key] for key in keys]


class RepeatChannelsForDepthwise(TosaRewrite):
    def apply(self, graph: Graph) -> int:
        if self.spec is None:
            return 0
        found = candidates(graph)
        if not found:
            return 0
        shared: Dict[Tuple[str, int, int], str] = {}
        applied = 0
        for c, ok in zip(found, decide(graph, found, self.spec)):
            if not ok:
                continue
            key = (c.op.inputs[0], c.multiplier, c.input_zp)
            if key not in shared:
                shared[key] = repeated_input(graph, c)
            rewrite(graph, c, shared[key])
            applied += 1
        return applied
