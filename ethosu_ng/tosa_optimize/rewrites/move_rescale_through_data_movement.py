# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""A per-tensor RESCALE on the far side of a TRANSPOSE or RESHAPE from the operator that would
fold it -> the RESCALE moved next to that operator.

Vela folds a RESCALE only into the operator writing its input or reading its output; a
TRANSPOSE or RESHAPE in between keeps it a layer of its own, and the data movement then moves
int32 data. Two cases:

- toward the writer: ``RESCALE(DM(x))`` where ``x`` is written by an operator that takes an
  output scale (a convolution, pooling, ADD/SUB/MUL ...; ``_rescale.OUTPUT_SCALING``) and
  read only by ``DM``: becomes ``DM(RESCALE(x))``;
- toward the reader: ``C(DM(RESCALE(x)))`` where the RESCALE is an operand scale ``C`` folds
  (``_rescale.absorbs_operand``) and its output is read only by ``DM``: becomes
  ``C(RESCALE(DM(x)))``.

Exact: a per-tensor RESCALE acts on each element alone, so it commutes with any permutation or
reshaping of the elements. SLICE, CONCAT and PAD are not moved through.
"""

from __future__ import annotations

from ethosu_ng.tosa_optimize.graph import Graph, Operator, Tensor
from ethosu_ng.tosa_optimize.rewrites._rescale import (
    OUTPUT_SCALING,
    absorbs_operand,
    read_rescale,
    single_reader,
)

DATA_MOVEMENT = ("TRANSPOSE", "RESHAPE")


class MoveRescaleThroughDataMovement:
    def apply(self, graph: Graph) -> int:
        changed = 0
        producers, consumers = graph.producers(), graph.consumers()
        for op in list(graph.ops):
            r = read_rescale(graph, op)
            if r is None or r.per_channel:
                continue
            dm = producers.get(op.inputs[0])
            if self._toward_writer(graph, producers, consumers, op, dm):
                self._swap(graph, dm, op)
            else:
                dm = single_reader(graph, consumers, op.outputs[0])
                reader = None
                if dm is not None and dm.op in DATA_MOVEMENT and dm.inputs[0] == op.outputs[0]:
                    reader = single_reader(graph, consumers, dm.outputs[0])
                if reader is None or not absorbs_operand(reader, r):
                    continue
                self._swap(graph, op, dm)
            changed += 1
            producers, consumers = graph.producers(), graph.consumers()
        return changed

    @staticmethod
    def _toward_writer(graph, producers, consumers, op: Operator, dm) -> bool:
        # An int32 result only: a RESCALE from 8/16 bits moves toward its reader, never back.
        if dm is None or dm.op not in DATA_MOVEMENT or graph.tensors[op.inputs[0]].dtype != "INT32":
            return False
        if single_reader(graph, consumers, dm.outputs[0]) is not op:
            return False
        x = dm.inputs[0]
        writer = producers.get(x)
        return (
            writer is not None
            and writer.op in OUTPUT_SCALING
            and single_reader(graph, consumers, x) is dm
        )

    @staticmethod
    def _swap(graph: Graph, first: Operator, second: Operator) -> None:
        """``second(first(x))`` -> ``first(second(x))``: ``second`` reads ``x``; ``first``
        writes ``second``'s output under its name."""
        x, mid, y = first.inputs[0], first.outputs[0], second.outputs[0]
        new_mid = graph.fresh_name(mid)
        if second.op == "RESCALE":  # x rescaled in its own shape
            shape, dtype = graph.shape_of(x), graph.tensors[y].dtype
        else:  # x moved in its own type
            shape, dtype = graph.shape_of(y), graph.tensors[x].dtype
        graph.tensors[new_mid] = Tensor(new_mid, shape, dtype)
        del graph.tensors[mid]
        second.inputs[0], second.outputs = x, [new_mid]
        first.inputs[0], first.outputs = new_mid, [y]
        # first just after second: every input of both is produced earlier.
        graph.ops = [o for o in graph.ops if o is not first]
        graph.ops.insert(next(k for k, o in enumerate(graph.ops) if o is second) + 1, first)
