# SPDX-License-Identifier: BSD-3-Clause
"""Why each copy Vela runs as a layer of its own remains: the TOSA operator it came from, what it
sits between, and the rule that predicts the copy.

A data-movement layer (a Transpose, MemoryCopy, Concat ... in Vela's per-layer table, not a
RESCALE: ``rescale_report.py`` explains those) with NPU cycles is a copy that no addressing
expressed: Vela folds a transpose into the write of the operator before it where it can (then
its layer costs 0 and is not a copy), hands a slice to a reader that takes a sliced input
(``rewrites/slice_before_transpose.COPYING_READERS`` do not), and our TOSA rewrites remove or
shrink the rest where Vela estimates it cheaper. What is left, by TOSA operator:

- TRANSPOSE of a graph input or output: the layout change of NCHW program IO, which the
  program's ``input_layout``/``output_layout`` (``nhwc``) removes;
- TRANSPOSE NHWC <-> NCHW elsewhere: a region of element-wise operators the lowering leaves in
  the model's NCHW layout between operators that compute in NHWC;
- another TRANSPOSE: a permutation Vela did not fold into its producer's write;
- DEPTHWISE_CONV2D: a channel multiplier, whose passes Vela interleaves (the repeated-input form,
  ``RepeatChannelsForDepthwise``, estimated dearer);
- REDUCE_*: a reduction over an axis Vela first moves innermost;
- SLICE: read by an operator that does not take a sliced input, or a graph output;
- RESHAPE: read by several operators, or a graph output (Vela copies it);
- anything else: the operator as Vela lowers it.

The classification reads the graph, not Vela; it is what the rules predict.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional

from ethosu_ng.module_profile import RESCALE_KIND, grouped
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.rewrites._layout import perm_of
from ethosu_ng.tosa_optimize.rewrites.slice_before_transpose import COPYING_READERS

TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def _neighbours(g: tosa_ir.Graph, op, producers, consumers):
    p = producers.get(op.inputs[0]) if op.inputs else None
    src = "input" if p is None else p.op
    readers = consumers.get(op.outputs[0], [])
    dst = "+".join(sorted({r.op for r in readers})) or "output"
    if op.outputs[0] in g.outputs and readers:
        dst += "+output"
    return src, dst, readers


def _transpose_reason(g, op, src) -> str:
    perm = tuple(perm_of(op))
    if op.inputs[0] in g.inputs:
        return "the layout change of an NCHW program input (input_layout nhwc removes it)"
    if op.outputs[0] in g.outputs:
        return "the layout change of an NCHW program output (output_layout nhwc removes it)"
    if perm in (TO_NCHW, TO_NHWC):
        return "a layout change between an NHWC operator and an element-wise region left in NCHW"
    return f"permutation {list(perm)}: not folded into {src}'s write"


def explain(g: tosa_ir.Graph, index: int, vela_op: str, producers, consumers) -> Dict[str, str]:
    """Pattern and reason of the copy Vela made as ``vela_op`` from the operator at ``index``."""
    op = g.ops[index]
    src, dst, readers = _neighbours(g, op, producers, consumers)
    shape = g.shape_of(op.outputs[0]) if op.outputs and op.outputs[0] in g.tensors else []
    axis = f" axis {op.attr['axis']}" if "axis" in op.attr else ""
    pattern = f"{op.op}{axis} {shape} from {src} to {dst}"
    if op.op == "TRANSPOSE":
        reason = _transpose_reason(g, op, src)
    elif op.op == "DEPTHWISE_CONV2D":
        w = g.tensors[op.inputs[1]].shape if len(op.inputs) > 1 else []
        multiplier = w[3] if len(w) == 4 else "?"
        reason = (
            f"channel multiplier {multiplier}: Vela interleaves its passes (the repeated-input "
            "form estimated dearer, or TOSA rewrites off)"
        )
    elif op.op.startswith("REDUCE_"):
        reason = "a reduction over an outer axis: Vela moves the axis innermost first"
    elif op.op == "SLICE":
        takers = sorted({r.op for r in readers if r.op in COPYING_READERS})
        if op.outputs[0] in g.outputs:
            reason = "a slice that is a graph output"
        else:
            reason = f"a slice read by {'+'.join(takers) or dst}, which takes no sliced input"
    elif op.op == "RESHAPE":
        if op.outputs[0] in g.outputs:
            reason = "a reshape that is a graph output"
        elif len(consumers.get(op.inputs[0], [])) > 1:
            reason = "a reshape of a tensor other operators read too"
        else:
            reason = f"a reshape {vela_op} Vela makes between {src} and {dst}"
    else:
        reason = f"{op.op} as Vela lowers it ({vela_op})"
    return {"pattern": pattern, "reason": reason}


def remaining_copies(tosa: bytes, layers: Iterable[Dict]) -> Optional[List[Dict]]:
    """One entry per data-movement layer with NPU cycles (not a RESCALE): its Vela and TOSA
    operator, NPU cycles, pattern and reason. ``layers``: attributed layers
    (``module_profile.attribute``). None for a graph with control flow (not analysed)."""
    todo = [
        layer
        for layer in layers
        if layer.get("data_movement_kind") not in (None, RESCALE_KIND)
        and int(layer.get("npu_cycles") or 0) > 0
    ]
    if not todo:
        return []
    try:
        g = tosa_ir.read(tosa)
    except tosa_ir.UnsupportedGraph:
        return None
    producers, consumers = g.producers(), g.consumers()
    out = []
    for layer in todo:
        k = layer.get("tosa_index")
        if k is None or not 0 <= k < len(g.ops):
            continue
        entry = {
            "vela_op": layer["vela_op"],
            "tosa_op": g.ops[k].op,
            "npu_cycles": int(layer["npu_cycles"]),
        }
        entry.update(explain(g, k, layer["vela_op"], producers, consumers))
        out.append(entry)
    return out


def summarize(entries: Iterable[Dict]) -> List[Dict]:
    """Entries grouped by (Vela operator, reason): layers and NPU cycles, largest first."""
    return grouped(entries, ("vela_op", "reason"))
