# SPDX-License-Identifier: BSD-3-Clause
"""Make the program's own inputs/outputs integer when the quantizer was asked to.

Keeps the uint8/int8 program-IO guarantee (seed 004): with ``EthosUNGQuantizer(spec,
input_dtype=torch.uint8, output_dtype=torch.int8)`` firmware feeds camera bytes straight in and
reads int8 scores; no float tensor and no CPU quantize/dequantize exist at the program edges.

The quantizer leaves its intent on each user-input placeholder (``meta["custom"]``, which
torch.export preserves); the PT2E graph then looks like ``x -> Q(u8) [-> DQ(u8) -> Q(i8)] ->
DQ(i8) -> ...`` and ``... -> Q(i8) -> DQ(i8) [-> Q(u8) -> DQ(u8)] -> output``. This pass makes
``x`` itself the tensor the chosen quantize produced, and returns the chosen quantize's output
directly, so the uint8 -> int8 step (a RESCALE with the unsigned flag) stays inside the delegate
and every tensor inside a delegate is int8.
"""

from __future__ import annotations

from typing import List, Optional

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.qdq_nodes import as_dtype, rename_outputs

IO_META_KEY = "ethosu_ng_program_io"


def program_io_request(program: ExportedProgram):
    """(input_dtype, output_dtype) recorded by EthosUNGQuantizer, or (None, None)."""
    for n in program.graph.nodes:
        if n.op in ("placeholder", "call_function"):
            req = (n.meta.get("custom") or {}).get(IO_META_KEY)
            if req:
                return _dtype(req.get("input")), _dtype(req.get("output"))
    return None, None


def _dtype(name: Optional[str]) -> Optional[torch.dtype]:
    return None if name is None else getattr(torch, name)


def _qdtype(node: Node) -> Optional[torch.dtype]:
    if (
        node.op == "call_function"
        and node.target in (QUANTIZE_PER_TENSOR, DEQUANTIZE_PER_TENSOR)
        and len(node.args) >= 6
    ):
        return node.args[5]
    return None


def _dtype_of(node: Node) -> Optional[torch.dtype]:
    val = node.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) else None


def _floating(node: Node) -> bool:
    dtype = _dtype_of(node)
    return dtype is not None and dtype.is_floating_point


class IntegerProgramIOError(ValueError):
    pass


class IntegerProgramIOPass(ProgramPass):
    # The IO placeholders are re-typed last among the IO passes, on the final int8 interior.
    modifies = frozenset({Aspect.PROGRAM_IO, Aspect.QPARAMS})
    requires = frozenset({Aspect.INTERIOR_DTYPE})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        in_dtype, out_dtype = program_io_request(program)
        if in_dtype is None and out_dtype is None:
            return program
        graph = program.graph_module.graph
        out_node = graph.output_node()
        names_before = [a.name if isinstance(a, Node) else None for a in out_node.args[0]]
        user_inputs = list(program.graph_signature.user_inputs)
        if in_dtype is not None:
            for k, n in enumerate(
                n for n in graph.nodes if n.op == "placeholder" and n.name in user_inputs
            ):
                self._integer_input(graph, k, n, in_dtype)
        if out_dtype is not None:
            outs = list(out_node.args[0])
            # Output specs and output arguments correspond by position.
            for k, (spec, a) in enumerate(zip(program.graph_signature.output_specs, outs)):
                if isinstance(a, Node) and spec.kind.name == "USER_OUTPUT":
                    outs[k] = self._integer_output(k, a, out_dtype)
            out_node.args = (type(out_node.args[0])(outs),)
        graph.eliminate_dead_code()
        graph.lint()
        program.graph_module.recompile()
        rename_outputs(program, names_before, out_node.args[0])
        return program

    def ensures(self, program: ExportedProgram) -> List[str]:
        """Where integer IO was requested, no program input or output is floating point."""
        in_dtype, out_dtype = program_io_request(program)
        graph = program.graph_module.graph
        broken = []
        if in_dtype is not None:
            user_inputs = set(program.graph_signature.user_inputs)
            inputs = [n for n in graph.nodes if n.op == "placeholder" and n.name in user_inputs]
            broken += [
                f"program input {k} ({n.name}) is {_dtype_of(n)}, not {in_dtype}"
                for k, n in enumerate(inputs)
                if _floating(n)
            ]
        if out_dtype is not None:
            specs = program.graph_signature.output_specs
            broken += [
                f"program output {k} ({a.name}) is {_dtype_of(a)}, not {out_dtype}"
                for k, (spec, a) in enumerate(zip(specs, graph.output_node().args[0]))
                if isinstance(a, Node) and spec.kind.name == "USER_OUTPUT" and _floating(a)
            ]
        return broken

    @staticmethod
    def _integer_input(graph, k: int, x: Node, dtype: torch.dtype) -> None:
        val = x.meta.get("val")
        if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
            return
        # Follow the single-user Q/DQ chain from x to the quantize that yields `dtype`.
        chain: List[Node] = []
        node = x
        while True:
            users = list(node.users)
            if len(users) != 1 or _qdtype(users[0]) is None:
                break
            node = users[0]
            chain.append(node)
            if node.target == QUANTIZE_PER_TENSOR and _qdtype(node) == dtype:
                break
        if not x.users:
            raise IntegerProgramIOError(
                f"program input {k} ({x.name}) is not read by the model, so no quantization "
                f"gives it a {dtype} scale and zero point: remove it from forward(), or keep "
                "float inputs (no input_dtype)"
            )
        if not chain or chain[-1].target != QUANTIZE_PER_TENSOR or _qdtype(chain[-1]) != dtype:
            raise IntegerProgramIOError(
                f"program input {k} ({x.name}) is not quantized to {dtype} right at the input "
                f"(users: {[u.name for u in x.users]}); was the model quantized with "
                f"EthosUNGQuantizer(input_dtype={dtype})?"
            )
        q = chain[-1]
        x.meta["val"] = as_dtype(val, dtype)
        x.meta.pop("tensor_meta", None)
        q.replace_all_uses_with(x)
        for n in reversed(chain):
            if not n.users:
                graph.erase_node(n)

    @staticmethod
    def _integer_output(k: int, out: Node, dtype: torch.dtype) -> Node:
        node = out
        while _qdtype(node) is not None:
            if node.target == QUANTIZE_PER_TENSOR and _qdtype(node) == dtype:
                return node
            node = node.args[0]
        raise IntegerProgramIOError(
            f"program output {k} ({out.name}) is not produced by a {dtype} quantize; was the model "
            f"quantized with EthosUNGQuantizer(output_dtype={dtype})?"
        )
