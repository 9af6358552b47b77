# SPDX-License-Identifier: BSD-3-Clause
"""A nearest-neighbour resize called with scale factors, written as index selects with the
source indices eager PyTorch reads, where a kernel could read others.

PyTorch's nearest resize reads source index ``floor(o * (1 / scale))`` when the call carries
scale factors (``interpolate(x, scale_factor=2.25)``), except where the output size is the input
size or twice it (``o``, ``o >> 1``), and ``floor(o * in / out)`` when it carries only sizes.
ExecuTorch's portable kernel always reads by the scale (2x2 by 2.25 is 4x4: eager reads rows
0, 0, 1, 1, the kernel 0, 0, 0, 1: 181 LSB off), and upstream's TOSA RESIZE by the sizes, so a
resize whose scale is not its output size over its input size silently disagrees with the model
somewhere. Such a resize is written here as one ``index_select`` per resized axis, with the
indices taken from eager PyTorch itself (the node's own op run on an index ramp), so the program
reads exactly the rows and columns the model reads, on the CPU or the NPU. A resize whose eager
indices equal both readings (every integer scale) is left as it is.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.fx import Node

from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten

# Nearest resizes over the last 1, 2 or 3 axes: their ``.vec`` form (input, output_size,
# scale_factors) and their ``.default`` form (input, output_size, *scales).
NEAREST_RESIZES = {
    aten.upsample_nearest1d.vec: 1,
    aten.upsample_nearest2d.vec: 2,
    aten.upsample_nearest3d.vec: 3,
    aten.upsample_nearest1d.default: 1,
    aten.upsample_nearest2d.default: 2,
    aten.upsample_nearest3d.default: 3,
}


def source_indices(node: Node) -> Optional[List[torch.Tensor]]:
    """Per resized axis, the source index eager PyTorch reads for each output position of the
    resize ``node`` (int64), or None where a read by its scale and a read by its sizes give them
    too (a call without scale factors reads by size in eager PyTorch and in every kernel)."""
    rank = NEAREST_RESIZES[node.target]
    val = node.args[0].meta.get("val")
    out = node.meta.get("val")
    scales = _scales(node, rank)
    if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor) or not any(scales):
        return None
    in_sizes = [int(s) for s in val.shape[-rank:]]
    out_sizes = [int(s) for s in out.shape[-rank:]]
    if any(s == 0 for s in in_sizes + out_sizes) or max(in_sizes) >= 2**24:
        return None
    rest = node.args[1:]
    indices, readable = [], True
    for axis in range(rank):
        shape = [1] * rank
        shape[axis] = in_sizes[axis]
        # Values are the source index along ``axis`` (exact in float32 below 2**24).
        ramp = torch.arange(in_sizes[axis], dtype=torch.float32).reshape(1, 1, *shape)
        ramp = ramp.expand(1, 1, *in_sizes).contiguous()
        picked = node.target(ramp, *rest, **node.kwargs)
        line = [0] * rank
        line[axis] = slice(None)
        eager = picked[(0, 0, *line)].to(torch.int64)
        indices.append(eager)
        n_in, n_out = in_sizes[axis], out_sizes[axis]
        by_size = _reading(n_out, n_in, n_in / n_out)
        by_scale = _reading(n_out, n_in, 1.0 / scales[axis]) if scales[axis] else by_size
        readable = readable and torch.equal(eager, by_size) and torch.equal(eager, by_scale)
    return None if readable else indices


def _reading(n_out: int, n_in: int, step: float) -> torch.Tensor:
    """``min(floor(o * step), n_in - 1)`` in float32, as the kernels compute a nearest index."""
    o = torch.arange(n_out, dtype=torch.float32)
    return torch.floor(o * torch.tensor(step, dtype=torch.float32)).clamp(max=n_in - 1).long()


def _scales(node: Node, rank: int) -> List[Optional[float]]:
    if node.target._overloadname == "vec":
        given = node.args[2] if len(node.args) > 2 else node.kwargs.get("scale_factors")
        return [float(v) for v in given] if given is not None else [None] * rank
    given = list(node.args[2:]) + [v for k, v in node.kwargs.items() if k.startswith("scales")]
    return [float(v) if v is not None else None for v in (given + [None] * rank)[:rank]]


def _constant(
    program: ExportedProgram, before: Optional[Node], name: str, value, fake_mode
) -> Node:
    graph = program.graph_module.graph
    program.constants[name] = value
    first = before if before is not None else next(iter(graph.nodes))
    with graph.inserting_before(first):
        ph = graph.placeholder(name)
    ph.meta["val"] = fake_mode.from_tensor(value, static_shapes=True)
    index = [n for n in graph.nodes if n.op == "placeholder"].index(ph)
    program.graph_signature.input_specs.insert(
        index,
        InputSpec(kind=InputKind.CONSTANT_TENSOR, arg=TensorArgument(name=ph.name), target=name),
    )
    return ph


class NearestResizeIndicesPass(ProgramPass):
    """Rewrites each nearest resize ``source_indices`` finds as index selects."""

    modifies = frozenset({Aspect.POOLS_AND_RESIZES, Aspect.DATA_MOVEMENT})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.rewritten: List[str] = []
        todo = [
            (n, idx)
            for n in graph.nodes
            if n.op == "call_function" and n.target in NEAREST_RESIZES
            for idx in [source_indices(n)]
            if idx is not None
        ]
        if not todo:
            return program
        sig = program.graph_signature
        user_inputs = {s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT}
        first_user = next(
            (n for n in graph.nodes if n.op == "placeholder" and n.name in user_inputs), None
        )
        for node, indices in todo:
            fake_mode = node.meta["val"].fake_mode
            x: Node = node.args[0]
            rank = len(indices)
            dims: Sequence[int] = range(x.meta["val"].dim() - rank, x.meta["val"].dim())
            for dim, idx in zip(dims, indices):
                ph = _constant(
                    program, first_user, f"_ethosu_ng_nearest_{node.name}_{dim}", idx, fake_mode
                )
                with graph.inserting_before(node):
                    sel = graph.call_function(aten.index_select.default, (x, dim, ph))
                sel.meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}
                with fake_mode:
                    sel.meta["val"] = aten.index_select.default(x.meta["val"], dim, ph.meta["val"])
                x = sel
            node.replace_all_uses_with(x)
            graph.erase_node(node)
            self.rewritten.append(node.name)
        graph.lint()
        program.graph_module.recompile()
        return program
