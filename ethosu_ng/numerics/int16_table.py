# SPDX-License-Identifier: BSD-3-Clause
"""int16 arithmetic as the hardware computes it where it differs from the quantized model: a
lookup is TOSA's 513-entry interpolated TABLE and the power-of-two RESCALE after it, and a
48-bit accumulator is requantized with a 16-bit multiplier.

Upstream lowers an int16 unary function (exp, rsqrt, sigmoid, ...) to this pair. Its result is
the function sampled at every 128th input code and interpolated linearly in between, so it is
not the function rounded once: measured on this repository's ``exp`` and ``rsqrt`` partitions,
2 steps apart where the function curves most. The verified compile evaluates such a lookup this
way (``op_numerics.exact_outputs(..., int16_tables=True)``) so that a lowering is judged against
the lookup it must implement, not against a precision no int16 table has.
"""

from __future__ import annotations

import copy
import math
from typing import Optional

import numpy as np
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


# Ops whose int16 x int8 (or int16 x int16) products TOSA accumulates in INT48, and the output
# axis their per-channel weight scales run along (None: per-tensor operands).
_INT48_ACCUMULATORS = {
    "aten.convolution.default": 1,
    "aten.linear.default": -1,
    "aten.bmm.default": None,
    "aten.mm.default": None,
    "aten.matmul.default": None,
}


def multiplier16(scale: float) -> float:
    """The scale a TOSA RESCALE of an INT48 input applies: ``scale32`` is false there, so the
    multiplier has 15 fraction bits (the mantissa rounded as upstream's
    ``_compute_multiplier_and_shift(..., 16)`` rounds it), a relative error up to 2**-16 that a
    reduction over the requantized values adds up."""
    mantissa, exponent = math.frexp(scale)
    m = round(mantissa * (1 << 15))
    return math.ldexp(m, exponent - 15)


def _dq_scales(node) -> Optional[torch.Tensor]:
    """The float64 scale(s) of a dequantize node, or None when ``node`` is not one."""
    from ethosu_ng.ops import DEQUANTIZE_OPS, DEQUANTIZE_PER_TENSOR_OPS, op_name

    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    name = op_name(getattr(node.target, "_op", node.target))
    if name not in DEQUANTIZE_OPS:
        return None
    scale = node.args[1]
    if name in DEQUANTIZE_PER_TENSOR_OPS:
        if not isinstance(scale, (int, float)):
            return None
        return torch.tensor([float(scale)], dtype=torch.float64)
    if isinstance(scale, torch.fx.Node) and scale.op == "get_attr":
        scale = getattr(node.graph.owning_module, scale.target)
    return scale.to(torch.float64).reshape(-1) if isinstance(scale, torch.Tensor) else None


def _folded_weight_scales(node) -> Optional[torch.Tensor]:
    """The per-output-channel scales of a symmetric int8 weight that the partition holds
    dequantized (a float constant): the largest magnitude of each channel is code 127 there.
    None unless every value is a whole number of its channel's steps."""
    if not isinstance(node, torch.fx.Node) or node.op != "get_attr":
        return None
    w = getattr(node.graph.owning_module, node.target, None)
    if not isinstance(w, torch.Tensor) or not w.is_floating_point() or w.dim() < 2:
        return None
    w = w.to(torch.float64).reshape(w.shape[0], -1)
    scales = w.abs().amax(1) / 127
    codes = w / scales.clamp_min(1e-30)[:, None]
    if ((codes - codes.round()).abs() > 1e-3).any():
        return None
    return scales


def _rank(node) -> Optional[int]:
    """The rank of a weight node's tensor (a dequantize's input or a stored constant)."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(val, torch.Tensor):
        return val.dim()
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        w = getattr(node.graph.owning_module, node.target, None)
        return w.dim() if isinstance(w, torch.Tensor) else None
    if isinstance(node, torch.fx.Node) and node.args:
        return _rank(node.args[0])
    return None


def with_int48_requantization(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of the quantized partition ``gm`` in which every int16 requantization of a 48-bit
    accumulator (an int16-activation convolution, linear or matmul) applies the 16-bit
    multiplier the hardware uses (``multiplier16``) instead of the exact scale ratio: the
    accumulator's value is multiplied by (hardware ratio / exact ratio) per output channel
    before its quantize."""
    from ethosu_ng.ops import QUANTIZE_PER_TENSOR_OPS, op_name

    out = copy.deepcopy(gm)
    graph = out.graph
    for q in list(graph.nodes):
        if q.op != "call_function":
            continue
        if op_name(getattr(q.target, "_op", q.target)) not in QUANTIZE_PER_TENSOR_OPS:
            continue
        if q.args[5] != torch.int16 or not isinstance(q.args[1], (int, float)):
            continue
        acc = q.args[0]
        if not isinstance(acc, torch.fx.Node) or acc.op != "call_function":
            continue
        kind = op_name(getattr(acc.target, "_op", acc.target))
        if kind not in _INT48_ACCUMULATORS or len(acc.args) < 2:
            continue
        activation = acc.args[0]
        if activation.op != "call_function" or activation.args[-1] != torch.int16:
            continue  # an int8 activation accumulates in INT32: a 32-bit multiplier
        weight = acc.args[1]
        s_in = _dq_scales(activation)
        s_w = (
            _dq_scales(weight) if _dq_scales(weight) is not None else _folded_weight_scales(weight)
        )
        if s_in is None or s_w is None:
            continue
        ratios = s_in * s_w / float(q.args[1])
        factor = torch.tensor(
            [multiplier16(float(r)) / float(r) for r in ratios], dtype=torch.float64
        )
        axis = _INT48_ACCUMULATORS[kind]
        # A linear's output channels are its last axis, where a 1-D factor broadcasts; a
        # convolution's output has its weight's rank, channels first.
        if factor.numel() > 1 and axis == 1:
            rank = _rank(weight)
            if rank is None:
                continue
            factor = factor.view([1, -1] + [1] * (rank - 2))
        # float32 constants (the exact evaluation runs a float32 path beside its float64 one):
        # the factor as the sum of two, which the float64 path adds back to full precision.
        high = factor.to(torch.float32)
        low = (factor - high.to(torch.float64)).to(torch.float32)
        terms = []
        for part, value in (("high", high), ("low", low)):
            attr = f"_int48_requantization_{q.name}_{part}"
            out.register_buffer(attr, value)
            with graph.inserting_before(q):
                terms.append(
                    graph.call_function(torch.ops.aten.mul.Tensor, (acc, graph.get_attr(attr)))
                )
        with graph.inserting_before(q):
            scaled = graph.call_function(torch.ops.aten.add.Tensor, tuple(terms))
        q.replace_input_with(acc, scaled)
    out.recompile()
    return out


def graph_tables(tosa: bytes) -> dict:
    """The int16 lookups a TOSA graph holds: {the FX node a TABLE was lowered from: (its 513
    entries, the power-of-two scale of the RESCALE after it, or None when that is not a single
    power-of-two RESCALE)}. Upstream names a table's constant after its node
    (``b_<node>_table_constant``)."""
    from ethosu_ng.tosa_optimize import graph as tosa_graph

    g = tosa_graph.read(tosa)
    consumers = g.consumers()
    found = {}
    for op in g.ops:
        if op.op != "TABLE" or g.tensors[op.inputs[0]].dtype != "INT16":
            continue
        name = op.inputs[1]
        if not (name.startswith("b_") and name.endswith("_table_constant")):
            continue
        entries = g.const_array(name)
        if entries is None:
            continue
        after = consumers.get(op.outputs[0], [])
        scale = None
        if len(after) == 1 and after[0].op == "RESCALE":
            m, s = (g.const_array(t) for t in after[0].inputs[1:3])
            if m is not None and s is not None and m.size == 1 and s.size == 1:
                scale = math.ldexp(int(m.reshape(-1)[0]), -int(s.reshape(-1)[0]))
        found[name[2 : -len("_table_constant")]] = (entries.reshape(-1).astype(np.int64), scale)
    return found


def table_mismatches(gm: torch.fx.GraphModule, tosa: bytes) -> list:
    """Where an int16 TABLE of the TOSA graph is not the lookup the quantized partition ``gm``
    asks for (its op and qparams): one line per table that differs, naming the node, the first
    entry off and by how much, or the RESCALE after it. A table whose node ``gm`` does not hold
    is not compared."""
    from ethosu_ng.adapters.arm import int16_table
    from ethosu_ng.numerics.op_numerics import _per_tensor_qparams

    nodes = {n.name: n for n in gm.graph.nodes}
    out = []
    for name, (entries, scale) in graph_tables(tosa).items():
        n = nodes.get(name)
        users = list(n.users) if n is not None else []
        qin = _per_tensor_qparams(n.args[0]) if n is not None and n.args else None
        qout = _per_tensor_qparams(users[0]) if len(users) == 1 else None
        if qin is None or qout is None:
            continue
        wanted = int16_table(n, qin[:4], qout[:4])
        if wanted is None:
            continue
        table, lshift = wanted
        want = table.to(torch.int64).numpy()
        if entries.shape != want.shape:
            out.append(f"TABLE of {name}: {entries.size} entries, expected {want.size}")
            continue
        off = np.flatnonzero(entries != want)
        if off.size:
            i = int(off[0])
            out.append(
                f"TABLE of {name}: {off.size} of 513 entries differ from its function at its "
                f"qparams (entry {i}: {int(entries[i])}, expected {int(want[i])})"
            )
        if scale != math.ldexp(1.0, lshift):
            out.append(f"TABLE of {name}: rescaled by {scale} after it, expected 2**{lshift}")
    return out
