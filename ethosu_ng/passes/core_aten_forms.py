"""Write ``conv2d`` and ``max_pool2d`` in the core ATen form their decomposition gives.

Lowering time, not numerics: executorch retraces the whole program through its decomposition
table whenever one op of the table is left in the graph (``run_decompositions``). On a CNN the
only such ops are these two, and each decomposes into a single core op:

    conv2d(x, w, b, stride, padding, dilation, groups)
        -> convolution(x, w, b, stride, padding, dilation, False, [0, 0], groups)
    max_pool2d(x, k, stride, padding, dilation, ceil_mode)
        -> max_pool2d_with_indices(x, k, stride, padding, dilation, ceil_mode)[0]

Rewriting those nodes in place is the same graph the retrace would give, and when nothing else
needs decomposing executorch skips the retrace (CPU s of that table decomposition timed alone on
the quantized program: resnet18 0.8, mobilenetv2_100 1.4, mobilenet_v3_small 1.8, convnext_atto
4.3; the lowering ratios it moved are in docs/benchmarks.md, from bench/compare_upstream.py).
The new nodes carry the old node's meta, as decomposition outputs do (a node pinned to the CPU
stays pinned). Left to the decomposition: an unbatched (rank-3) input, string padding
(``conv2d.padding``), keyword arguments, and any other op.
"""

from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram
from torch.fx import Node

aten = torch.ops.aten
# conv2d's defaults after (input, weight): bias, stride, padding, dilation, groups.
_CONV2D_DEFAULTS = (None, [1, 1], [0, 0], [1, 1], 1)


def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


class CoreAtenFormsPass:
    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.rewritten = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or node.kwargs:
                continue
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or val.dim() != 4:
                continue
            if node.target == aten.conv2d.default:
                self._conv(graph, node)
            elif node.target == aten.max_pool2d.default:
                self._max_pool(graph, node, val)
        if self.rewritten:
            graph.lint()
            program.graph_module.recompile()
        return program

    def _conv(self, graph, node: Node) -> None:
        x, w, *rest = node.args
        bias, stride, padding, dilation, groups = (*rest, *_CONV2D_DEFAULTS[len(rest) :])
        args = (x, w, bias, _pair(stride), _pair(padding), _pair(dilation), False, [0, 0], groups)
        with graph.inserting_before(node):
            conv = graph.call_function(aten.convolution.default, args)
        conv.meta = dict(node.meta)
        node.replace_all_uses_with(conv)
        graph.erase_node(node)
        self.rewritten += 1

    def _max_pool(self, graph, node: Node, val: torch.Tensor) -> None:
        with graph.inserting_before(node):
            pool = graph.call_function(aten.max_pool2d_with_indices.default, tuple(node.args))
            first = graph.call_function(operator.getitem, (pool, 0))
        pool.meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}
        with val.fake_mode:
            pool.meta["val"] = (val, torch.empty(val.shape, dtype=torch.int64))
        first.meta = dict(node.meta)
        node.replace_all_uses_with(first)
        graph.erase_node(node)
        self.rewritten += 1
