# SPDX-License-Identifier: BSD-3-Clause
"""What a user needs to feed and read a lowered program: each program input/output's dtype,
shape and quantization parameters (the same values the delegate blobs' IO tables hold)."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch.fx import Node

from ethosu_ng.blob import DelegateBlob
from ethosu_ng.ops import (
    CALL_DELEGATE,
    DATA_MOVEMENT_OPS,
    is_per_tensor_dequantize,
    node_op_name,
)
from ethosu_ng.partitioning.delegate_io import integer_tensor_qparams


@dataclass(frozen=True)
class ProgramIO:
    name: str
    dtype: torch.dtype
    shape: Tuple[int, ...]
    scale: Optional[float]  # None for float IO (quantization happens inside the program)
    zero_point: Optional[int]
    # Step of the quantization grid the values lie on: ``scale`` for integer IO; for a float
    # output, the scale of the dequantize that produces it. 1 LSB when comparing outputs.
    grid_scale: Optional[float] = None

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        """Float tensor -> what this input expects (identity for float IO)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{self.name}: quantize takes one tensor, not a {type(x).__name__} "
                "(of a tuple of example inputs x, quantize x[0])"
            )
        if self.scale is None:
            return x.to(self.dtype)
        info = torch.iinfo(self.dtype)
        return torch.clamp(torch.round(x / self.scale) + self.zero_point, info.min, info.max).to(
            self.dtype
        )

    def dequantize(self, q: torch.Tensor) -> torch.Tensor:
        if self.scale is None:
            return q.float()
        return (q.to(torch.float32) - self.zero_point) * self.scale


@dataclass(frozen=True)
class IOQuantization:
    inputs: List[ProgramIO]
    outputs: List[ProgramIO]


def _program(p):
    return p.exported_program() if hasattr(p, "exported_program") else p


def _blob(gm, call: Node) -> DelegateBlob:
    return DelegateBlob.from_bytes(getattr(gm, call.args[0].target).processed_bytes)


def _input_qparams(gm, x: Node):
    for u in x.users:
        if u.op == "call_function" and u.target is CALL_DELEGATE:
            spec = _blob(gm, u).inputs[list(u.args[1:]).index(x)]
            return spec.scale, spec.zero_point
    qp = integer_tensor_qparams(x)
    if qp is not None:
        return qp
    # Read first by data movement on the CPU (e.g. a cat the verified compile moved off the
    # NPU): the bytes keep their meaning, so the qparams are those of what they become.
    for u in x.users:
        if node_op_name(u) in DATA_MOVEMENT_OPS:
            qp = _input_qparams(gm, u)
            if qp != (None, None):
                return qp
    return (None, None)


def _output_qparams(gm, y: Node):
    if y.op == "call_function" and y.target == operator.getitem:
        call = y.args[0]
        if isinstance(call, Node) and call.target is CALL_DELEGATE:
            spec = _blob(gm, call).outputs[y.args[1]]
            return spec.scale, spec.zero_point
    qp = integer_tensor_qparams(y)
    return qp if qp is not None else (None, None)


def io_quantization(program) -> IOQuantization:
    """``program``: an EdgeProgramManager, ExecutorchProgramManager or lowered ExportedProgram."""
    ep = _program(program)
    gm = ep.graph_module
    sig = ep.graph_signature
    user_inputs = set(sig.user_inputs)
    ins = []
    for n in gm.graph.nodes:
        if n.op == "placeholder" and n.name in user_inputs:
            v = n.meta["val"]
            scale, zp = (None, None) if v.dtype.is_floating_point else _input_qparams(gm, n)
            ins.append(ProgramIO(n.name, v.dtype, tuple(v.shape), scale, zp, scale))
    outs = []
    # Output specs and the output node's arguments correspond by position.
    for spec, y in zip(sig.output_specs, gm.graph.output_node().args[0]):
        if spec.kind.name != "USER_OUTPUT" or not isinstance(y, Node):
            continue
        name = y.name
        v = y.meta["val"]
        scale, zp = (None, None) if v.dtype.is_floating_point else _output_qparams(gm, y)
        grid = scale
        if scale is None and is_per_tensor_dequantize(y):
            grid = float(y.args[1])
        outs.append(ProgramIO(name, v.dtype, tuple(v.shape), scale, zp, grid))
    return IOQuantization(ins, outs)
