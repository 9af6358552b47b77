# SPDX-License-Identifier: BSD-3-Clause
"""Store a float state buffer as int8 when everything it feeds and is fed from is quantized.

Keeps seed 002's state-buffer guarantee. A streaming model keeps a window in a mutable buffer:
``new = cat(state[:, :, k:], x); state.copy_(new)``. PT2E quantizes ``new`` (its quantize feeds
the next op) but not the buffer, so the ``slice -> cat`` cluster stays float and runs on the CPU
(upstream 1.5.1 rejects it outright with uint8 IO: "Shared-qspec bridge cluster touches uint8
model IO"). If the value written back already has a quantize ``Q_P`` (scale, zero point P), then
storing the buffer as ``Q_P(state)`` loses nothing the model does not already lose: every value
written is ``Q_P``-representable, and the initial value is quantized once here. We rewrite

    state[f32] -> ...;  copy_(state, v)   into   state[int8] -> DQ_P -> ...;  copy_(state, Q_P(v))

after which the slice/cat run in int8 on the NPU and the state lives in int8 (4x less RAM).

The written value's quantize may sit behind data-movement ops (``new.reshape(1, -1)`` into a
linear layer, a permute into a conv, several readers): those commute exactly with a per-tensor
quantize, so ``Q_P`` is the quantize every reader path reaches first through them. If a path
reaches anything else (a float consumer) or the paths disagree on P, the buffer stays float.
When the quantizer annotated the cluster itself (int8 program input), the value written back is
already ``DQ_P(v)``, so P is known and ``Q_P(DQ_P(v))`` written back is ``v``.

A write-back is found in either form a buffer mutation takes: the ``copy_(state, v)`` node of
``torch.export.export``, or, in a program functionalized before lowering (``run_decompositions``),
the output node's argument at a ``BUFFER_MUTATION`` output spec whose target is the buffer. Both
are rewritten alike; in the second, the output argument becomes ``Q_P(v)`` and the spec is renamed
to it. A value written back that is also returned to the user is read in float: the buffer stays
float.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Tuple

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Node

from ethosu_ng.ops import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.qdq_nodes import (
    QParams,
    as_dtype,
    qparams,
    quantize_qparams_downstream,
    rename_outputs,
)

_COPY = (torch.ops.aten.copy_.default,)

# One write-back of a buffer: (state placeholder, value written, the node writing it, and how to
# make that node write another value instead).
_Write = Tuple[Node, Node, Node, Callable[[Node], None]]


def _copy_writes(graph) -> Iterator[_Write]:
    """``copy_(state, v)`` nodes (a buffer mutation as ``torch.export.export`` writes it)."""
    for copy in list(graph.nodes):
        if copy.op == "call_function" and copy.target in _COPY:

            def write(q: Node, copy=copy, value=copy.args[1]) -> None:
                copy.replace_input_with(value, q)
                copy.meta["val"] = as_dtype(copy.meta["val"], q.meta["val"].dtype)

            yield copy.args[0], copy.args[1], copy, write


def _mutation_outputs(program: ExportedProgram) -> Iterator[_Write]:
    """BUFFER_MUTATION outputs (a buffer mutation in a functionalized program): the output
    node's argument at the spec's position is the buffer's new value."""
    graph = program.graph_module.graph
    out = graph.output_node()
    by_target = {
        s.target: s.arg.name
        for s in program.graph_signature.input_specs
        if s.kind == InputKind.BUFFER
    }
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    for k, spec in enumerate(program.graph_signature.output_specs):
        if spec.kind != OutputKind.BUFFER_MUTATION or spec.target not in by_target:
            continue
        value = out.args[0][k]
        if not isinstance(value, Node):
            continue

        def write(q: Node, k=k) -> None:
            outs = list(out.args[0])
            outs[k] = q
            out.args = (type(out.args[0])(outs),)

        yield placeholders[by_target[spec.target]], value, out, write


def _written_qparams(value: Node, writer: Node) -> Optional[QParams]:
    """The P of ``Q_P`` the value written back has (see the module docstring), else None."""
    if value.op == "call_function" and value.target == DEQUANTIZE_PER_TENSOR:
        return qparams(value)
    # The output node also returns user outputs: skip it only when it reads the value once (as
    # the write-back); a value also returned to the user is read in float.
    skip = writer
    if writer.op == "output" and sum(a is value for a in writer.args[0]) != 1:
        skip = None
    qps = quantize_qparams_downstream(value, skip=skip)
    if len(qps) != 1 or None in qps:
        return None  # the written value is not (uniquely) quantized: leave it float
    return qps.pop()


class QuantizeStateBuffersPass(ProgramPass):
    modifies = frozenset({Aspect.STATE_BUFFERS, Aspect.QPARAMS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        sig = program.graph_signature
        buffers = {s.arg.name: s for s in sig.input_specs if s.kind == InputKind.BUFFER}
        out = graph.output_node()
        names_before = [a.name if isinstance(a, Node) else None for a in out.args[0]]
        self.quantized = []
        writes = list(_copy_writes(graph)) + list(_mutation_outputs(program))
        for state, value, writer, write in writes:
            if state.op != "placeholder" or state.name not in buffers or value is state:
                continue
            val = state.meta.get("val")
            if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
                continue
            qp = _written_qparams(value, writer)
            if qp is None:
                continue
            spec = buffers[state.name]
            store = program.state_dict if spec.persistent else program.constants
            scale, zp, qmin, qmax, dtype = qp
            store[spec.target] = torch.ops.quantized_decomposed.quantize_per_tensor(
                store[spec.target], scale, zp, qmin, qmax, dtype
            )
            # A copy_ reads the state as its destination; the output node reads it only as a
            # user output (the write-back position holds the value written).
            readers = [u for u in state.users if u is not writer or u.op == "output"]
            state.meta["val"] = as_dtype(val, dtype)
            state.meta.pop("tensor_meta", None)
            # ExecuTorch serializes no initial value for a mutated buffer unless asked; a zeroed
            # int8 buffer is not "zero" once it has a zero point, so ask.
            state.meta["et_init_buffer"] = True
            with graph.inserting_after(state):
                dq = graph.call_function(DEQUANTIZE_PER_TENSOR, (state, *qp))
            dq.meta = {"val": val}
            for r in readers:
                r.replace_input_with(state, dq)
            with graph.inserting_before(writer):
                q = graph.call_function(QUANTIZE_PER_TENSOR, (value, *qp))
            q.meta = dict(value.meta, val=as_dtype(value.meta["val"], dtype))
            write(q)
            self.quantized.append(spec.target)
        if self.quantized:
            graph.lint()
            program.graph_module.recompile()
            rename_outputs(program, names_before, out.args[0])
        return program
