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
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ethosu_ng.ops import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.qdq_nodes import as_dtype, qparams, quantize_qparams_downstream

_COPY = (torch.ops.aten.copy_.default,)


class QuantizeStateBuffersPass(ProgramPass):
    modifies = frozenset({Aspect.STATE_BUFFERS, Aspect.QPARAMS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        sig = program.graph_signature
        buffers = {s.arg.name: s for s in sig.input_specs if s.kind == InputKind.BUFFER}
        self.quantized = []
        for copy in list(graph.nodes):
            if copy.op != "call_function" or copy.target not in _COPY:
                continue
            state, value = copy.args[0], copy.args[1]
            if state.op != "placeholder" or state.name not in buffers:
                continue
            val = state.meta.get("val")
            if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
                continue
            if value.op == "call_function" and value.target == DEQUANTIZE_PER_TENSOR:
                qp = qparams(value)
                if qp is None:
                    continue
            else:
                qps = quantize_qparams_downstream(value, skip=copy)
                if len(qps) != 1 or None in qps:
                    continue  # the written value is not (uniquely) quantized: leave it float
                qp = qps.pop()
            spec = buffers[state.name]
            store = program.state_dict if spec.persistent else program.constants
            scale, zp, qmin, qmax, dtype = qp
            store[spec.target] = torch.ops.quantized_decomposed.quantize_per_tensor(
                store[spec.target], scale, zp, qmin, qmax, dtype
            )
            readers = [u for u in state.users if u is not copy]
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
            with graph.inserting_before(copy):
                q = graph.call_function(QUANTIZE_PER_TENSOR, (value, *qp))
            q.meta = dict(value.meta, val=as_dtype(value.meta["val"], dtype))
            copy.replace_input_with(value, q)
            copy.meta["val"] = as_dtype(copy.meta["val"], dtype)
            self.quantized.append(spec.target)
        if self.quantized:
            graph.lint()
            program.graph_module.recompile()
        return program
