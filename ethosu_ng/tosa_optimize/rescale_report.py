# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Why each RESCALE Vela ran as a layer of its own was not folded: the TOSA pattern around it and
what blocked the fold, by Vela 5.1's rules (``GraphIrOptimiser::FuseRescale`` and the targets'
``SupportsQuantization``; ``rewrites/_rescale.py``).

A RESCALE folds into the operator reading its output (an operand scale) or into the one writing
its input (an output scale); the folded-away tensor must have one reader and one writer and not
be a graph input or output, its zero point must be 0, and the operator must take that scale:
data-movement operators (TRANSPOSE, RESHAPE, ...) and activations (CLAMP, TABLE) take none, MUL
no operand scale, an int32 operand no operand scale, elementwise operators with a 32-bit input or
output only a shift as output scale, and on Ethos-U55/U65 ADD/SUB operand scales only when the
two differ or fit 16 bits without shift. ``blocker`` names the first of these that applies on
each side; the classification reads the graph, not Vela, so it is what the rules predict.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional

from ethosu_ng.module_profile import grouped
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    NARROW,
    OUTPUT_SCALING,
    Rescale,
    read_rescale,
    reduce_scale,
)

DATA_MOVEMENT = frozenset(
    {"TRANSPOSE", "RESHAPE", "SLICE", "CONCAT", "PAD", "TILE", "REVERSE", "GATHER", "IDENTITY"}
)
ACTIVATIONS = frozenset({"CLAMP", "TABLE", "SIGMOID", "TANH", "ERF"})


def _consumer_blocker(g, r: Rescale, consumers, family: str) -> str:
    y = r.op.outputs[0]
    readers = consumers.get(y, [])
    if y in g.outputs:
        return "its output is a graph output"
    if len(readers) != 1 or readers[0].inputs.count(y) != 1:
        return f"a second consumer (read {len(readers)} times)"
    c = readers[0]
    if c.op in DATA_MOVEMENT:
        return f"a {c.op.lower()} in between"
    if c.op in ACTIVATIONS:
        return f"{c.op} takes no operand scale"
    if c.op not in ("ADD", "SUB", "MUL"):
        return f"{c.op} takes no operand scale"
    if r.in_dtype not in NARROW:
        return f"{r.in_dtype} in (an operand scale needs an 8/16-bit operand)"
    if r.per_channel:
        return "a per-channel scale (operand scales are per tensor)"
    if r.output_zp != 0:
        return "a zero point on the int32 side"
    if c.op == "MUL" and not r.is_unit_scale:
        return "MUL takes no operand scale"
    if family != "ethos-u85" and c.op in ("ADD", "SUB"):
        m, s = reduce_scale(r.multiplier[0], r.shift[0])
        if s != 0 or m >= 1 << 15:
            return f"{c.op} operand scale outside U55/U65's forms (equal scales or a shift)"
    return "the other operand of the binary operator does not fold"


def _producer_blocker(g, r: Rescale, producers, consumers) -> str:
    x = r.op.inputs[0]
    p = producers.get(x)
    if x in g.inputs or p is None:
        return "its input is a graph input"
    if len(consumers.get(x, [])) != 1:
        return f"a second consumer of its input (read {len(consumers[x])} times)"
    if p.op in DATA_MOVEMENT:
        return f"a {p.op.lower()} in between"
    if p.op not in OUTPUT_SCALING:
        return f"{p.op} takes no output scale"
    if r.input_zp != 0:
        return "a zero point on the input side"
    if p.op in ("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM") and not all(
        reduce_scale(m, s)[0] == 1 for m, s in zip(r.multiplier, r.shift)
    ):
        return f"{p.op} with a 32-bit operand or result takes only a shift"
    return "the producer does not take this scale"


def explain(g: tosa_ir.Graph, index: int, family: str) -> Dict[str, str]:
    """Pattern and blockers of the RESCALE at operator ``index`` of ``g``."""
    op = g.ops[index]
    producers, consumers = g.producers(), g.consumers()
    r = read_rescale(g, op)
    p = producers.get(op.inputs[0])
    readers = sorted({c.op for c in consumers.get(op.outputs[0], [])})
    src = p.op if p is not None else "input"
    dst = "+".join(readers) or "output"
    x_dtype, y_dtype = g.tensors[op.inputs[0]].dtype, g.tensors[op.outputs[0]].dtype
    if y_dtype == "INT32" and x_dtype in NARROW:
        pattern = f"operand of {dst} (from {src})"
    elif x_dtype == "INT32":
        pattern = f"result of {src} (into {dst})"
    else:
        pattern = f"{x_dtype}->{y_dtype} between {src} and {dst}"
    if r is None:
        return {"pattern": pattern, "blocker": "parameters not constant"}
    if x_dtype == "INT32" and y_dtype == "INT32":
        blocker = "int32 in and out"
    elif r.unsigned:
        blocker = "an unsigned input or output"
    else:
        blocker = (
            f"into reader: {_consumer_blocker(g, r, consumers, family)}; "
            f"into writer: {_producer_blocker(g, r, producers, consumers)}"
        )
    return {"pattern": pattern, "blocker": blocker}


def standalone_rescales(tosa: bytes, layers: Iterable, target: str) -> Optional[List[Dict]]:
    """One entry per Vela layer made from a TOSA RESCALE: its TOSA output, NPU cycles, pattern
    and blocker. ``layers``: Vela layers or their dicts (``tosa_index``, ``npu_cycles``).
    None for a graph with control flow (more than one block), which is not analysed."""
    family = "-".join(target.split("-")[:2])
    g: Optional[tosa_ir.Graph] = None
    out = []
    for layer in layers:
        get = layer.get if isinstance(layer, dict) else lambda k, _l=layer: getattr(_l, k, None)
        k = get("tosa_index")
        if g is None:
            try:
                g = tosa_ir.read(tosa)
            except tosa_ir.UnsupportedGraph:
                return None
        if k is None or not 0 <= k < len(g.ops) or g.ops[k].op != "RESCALE":
            continue
        entry = {"tosa_output": g.ops[k].outputs[0], "npu_cycles": int(get("npu_cycles") or 0)}
        entry.update(explain(g, k, family))
        out.append(entry)
    return out


def summarize(entries: Iterable[Dict]) -> List[Dict]:
    """Entries grouped by (pattern, blocker): layers and NPU cycles, largest first. A RESCALE
    Vela splits into several layers (U55: Add and Mul) counts once per layer."""
    return grouped(entries, ("pattern", "blocker"))
