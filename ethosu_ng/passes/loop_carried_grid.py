# SPDX-License-Identifier: BSD-3-Clause
"""Each value a quantized ``while_loop`` body returns, requantized to the loop's carried grid.

In the TOSA graph a carried value is one int8 tensor that re-enters the body every iteration,
read on one grid: upstream's lowering reads every carried value with the qparams of the loop's
first input, and rescales a body result to them only where the main graph reads that result
(a ``getitem``). A result nobody reads after the loop, such as a limit passed through the body,
goes back into the next iteration on its own grid and is misread there: a limit of 4 on a grid
of 4/255 read on a carried grid of 7.1/255 became 7.1, and the loop ran on until it saturated.

The eager quantized model has no such step: its body output is dequantized, and the next
iteration quantizes it on the body's input grid. Quantizing every body result on the carried
grid before it returns (``Q -> DQ``, a RESCALE in TOSA) gives the eager model the step the
hardware takes, and gives the lowering a result already on the grid it reads. The entry and
the exit share that grid by annotation (``share_loop_carried_qparams``, which
``EthosUNGQuantizer`` runs).
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from ethosu_ng.ops import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR
from ethosu_ng.passes.qdq_nodes import qparams


def requantize_loop_results(gm: GraphModule) -> int:
    """Insert ``Q -> DQ`` on the carried grid on every body result of every ``while_loop`` in
    ``gm`` and the graphs it calls whose grid differs; return how many were inserted."""
    inserted = 0
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and isinstance(getattr(gm, node.target, None), GraphModule):
            inserted += requantize_loop_results(getattr(gm, node.target))
        if node.op != "call_function" or node.target is not torch.ops.higher_order.while_loop:
            continue
        carried = list(node.args[2]) + list(node.args[3])
        first = carried[0] if carried else None
        grid = qparams(first) if isinstance(first, Node) else None
        if grid is None or first.target is not DEQUANTIZE_PER_TENSOR:
            continue
        body = getattr(gm, node.args[1].target)
        output = body.graph.output_node()
        results = list(output.args[0])
        for k, result in enumerate(results):
            own = qparams(result) if isinstance(result, Node) else None
            if own is None or result.target is not DEQUANTIZE_PER_TENSOR or own == grid:
                continue
            # The converted module is exported again before lowering: no fake values needed.
            with body.graph.inserting_after(result):
                q = body.graph.call_function(QUANTIZE_PER_TENSOR, (result, *grid))
            with body.graph.inserting_after(q):
                results[k] = body.graph.call_function(DEQUANTIZE_PER_TENSOR, (q, *grid))
            inserted += 1
        output.args = (tuple(results),)
        body.recompile()
    if inserted:
        gm.recompile()
    return inserted


def share_loop_carried_qparams(model: torch.fx.GraphModule) -> None:
    """One set of qparams for every value a ``while_loop`` carries, at its entry and its exit.

    Upstream's lowering reads all of a loop's carried values with one set of qparams
    (``InsertRescaleInt32Pass``: "one set of qparams for a list of inputs"), as upstream
    annotates a loop without additional inputs. With additional inputs, which upstream's
    normalization appends to the carried ones, upstream's annotation gives each input its own
    observer and the result none, and the TOSA graph then reads them all on the first one's grid:
    a loop that doubles a value until its sum reaches a threshold buffer read the threshold 16x
    too small and stopped before its first doubling. Here they share the first value's qparams
    as without additional inputs, so the TOSA graph computes what the quantized model does; the
    shared grid spans every carried value, the additional ones included."""
    from torchao.quantization.pt2e.quantizer import (
        QuantizationAnnotation,
        SharedQuantizationSpec,
    )

    for node in model.graph.nodes:
        extra = node.meta.get("additional_inputs") if node.op == "call_function" else None
        annotation = node.meta.get("quantization_annotation")
        if node.target != torch.ops.higher_order.while_loop or not extra or annotation is None:
            continue
        carried = list(node.args[2])
        if not carried or any(a not in annotation.input_qspec_map for a in carried):
            continue
        shared = SharedQuantizationSpec((carried[0], node))
        for a in carried[1:]:
            annotation.input_qspec_map[a] = shared
        for user in node.users:
            if user.target is operator.getitem and "quantization_annotation" not in user.meta:
                user.meta["quantization_annotation"] = QuantizationAnnotation(
                    output_qspec=shared, _annotated=True
                )
