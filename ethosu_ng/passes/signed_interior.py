# SPDX-License-Identifier: BSD-3-Clause
"""uint8 only at the program's IO; int8 everywhere inside a delegate.

Keeps part of seed 002/004's guarantee. With uint8 program IO, PT2E's shared-qspec clusters that
touch the IO (``cat(conv(x), y_u8)``, ``view(x_u8)``, an output produced by ``cat``) can leave a
dequantize of a uint8 tensor feeding a float op directly, or a float op feeding a uint8 quantize.
TOSA has no uint8 inside a graph, so upstream keeps those ops in float on the CPU.

A uint8 tensor with (scale s, zero point z) holds exactly the same values as the int8 tensor
``q - 128`` with (s, z - 128). So we insert that exact re-typing at the edge:

    DQ_u8(x) -> op          becomes  DQ_u8(x) -> Q_i8 -> DQ_i8 -> op
    op -> Q_u8 -> out       becomes  op -> Q_i8 -> DQ_i8 -> Q_u8 -> out

The ``DQ_u8 -> Q_i8`` / ``DQ_i8 -> Q_u8`` pairs lower to a RESCALE with the unsigned flag; the
op in between now sees int8 and can be delegated (or commuted into int8 by the next pass).
"""

from __future__ import annotations

from typing import List

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.qdq_nodes import insert_qdq


def _u8(node: Node) -> bool:
    return (
        node.op == "call_function"
        and node.target in (QUANTIZE_PER_TENSOR, DEQUANTIZE_PER_TENSOR)
        and len(node.args) >= 6
        and node.args[5] == torch.uint8
        and isinstance(node.args[2], int)
    )


def _signed(node: Node):
    scale, zp = node.args[1], node.args[2]
    return (scale, zp - 128, -128, 127, torch.int8)


class SignedInteriorPass(ProgramPass):
    # State buffers are already int8 clusters when the uint8 edges are re-typed.
    modifies = frozenset({Aspect.INTERIOR_DTYPE, Aspect.QPARAMS})
    requires = frozenset({Aspect.STATE_BUFFERS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        self.rewritten = 0
        for n in list(graph.nodes):
            if not _u8(n):
                continue
            if n.target == DEQUANTIZE_PER_TENSOR:
                # The program output itself may be uint8 (that is IO); only ops are re-typed.
                users = [
                    u
                    for u in n.users
                    if u.op == "call_function" and u.target != QUANTIZE_PER_TENSOR
                ]
                if not users:
                    continue
                _, dq = insert_qdq(graph, n, _signed(n), meta_from=n)
                for u in users:
                    u.replace_input_with(n, dq)
                self.rewritten += 1
            else:  # quantize to uint8
                src = n.args[0]
                if not isinstance(src, Node) or src.target == DEQUANTIZE_PER_TENSOR:
                    continue
                _, dq = insert_qdq(graph, src, _signed(n), meta_from=n, before=n)
                n.replace_input_with(src, dq)
                self.rewritten += 1
        if self.rewritten:
            graph.lint()
            program.graph_module.recompile()
        return program

    def ensures(self, program: ExportedProgram) -> List[str]:
        """No op reads a uint8 dequantize or feeds a uint8 quantize: uint8 only at the IO."""
        broken = []
        for n in program.graph_module.graph.nodes:
            if not _u8(n):
                continue
            if n.target == DEQUANTIZE_PER_TENSOR:
                ops = [
                    u.name
                    for u in n.users
                    if u.op == "call_function" and u.target != QUANTIZE_PER_TENSOR
                ]
                if ops:
                    broken.append(f"{', '.join(ops)} read(s) the uint8 dequantize {n.name}")
            else:
                src = n.args[0]
                if (
                    isinstance(src, Node)
                    and src.op == "call_function"
                    and src.target != DEQUANTIZE_PER_TENSOR
                ):
                    broken.append(f"{src.name} feeds the uint8 quantize {n.name}")
        return broken
