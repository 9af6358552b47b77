# SPDX-License-Identifier: BSD-3-Clause
"""Numerics without an NPU: run each delegate's TOSA graph on the TOSA reference model.

``check_delegates`` walks a lowered program in Python. CPU ops run as PyTorch ops; at each
delegate call it runs the partition's original (pre-preprocess) edge graph, which is the eager
quantized model restricted to that partition, and the delegate's embedded TOSA flatbuffer on the
same integer inputs, and records the largest difference in LSB. The program continues on the
reference values, so every delegate is judged on exactly the inputs the quantized model gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Sequence

import numpy as np
import torch
from torch.fx import Interpreter

from ethosu_ng.blob import DelegateBlob
from ethosu_ng.ops import CALL_DELEGATE


@dataclass
class DelegateNumerics:
    name: str
    max_lsb: List[int]  # per output: max |tosa - reference| in integer steps
    outputs_tosa: List[torch.Tensor] = field(repr=False, default_factory=list)
    outputs_ref: List[torch.Tensor] = field(repr=False, default_factory=list)

    @property
    def worst(self) -> int:
        return max(self.max_lsb, default=0)


def npu_to_logical(arr: np.ndarray, spec) -> torch.Tensor:
    """An NPU buffer laid out in ``spec.dim_order`` -> a contiguous tensor of ``spec.shape``."""
    physical = tuple(spec.shape[d] for d in spec.dim_order)
    t = torch.from_numpy(np.ascontiguousarray(arr)).reshape(physical)
    inverse = [spec.dim_order.index(d) for d in range(len(spec.shape))]
    return t.permute(inverse).contiguous().to(spec.dtype)


def logical_to_npu(t: torch.Tensor, spec) -> np.ndarray:
    return np.ascontiguousarray(t.permute(list(spec.dim_order)).contiguous().numpy())


def run_tosa(flatbuffer: bytes, inputs: Sequence[torch.Tensor]) -> List[np.ndarray]:
    return run_tosa_arrays(
        flatbuffer, [np.ascontiguousarray(t.detach().contiguous().numpy()) for t in inputs]
    )


def run_tosa_arrays(flatbuffer: bytes, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
    import tosa_reference_model as refmodel

    arrays = [np.ascontiguousarray(a) for a in arrays]
    outs, status = refmodel.run(flatbuffer, arrays, initialize_variable_tensor_from_numpy=True)
    if status != refmodel.GraphStatus.TOSA_VALID:
        raise RuntimeError(f"TOSA reference model rejected the graph: {status}")
    return outs


class _DelegateChecker(Interpreter):
    def __init__(self, gm, continue_with: str):
        super().__init__(gm)
        self.results: List[DelegateNumerics] = []
        self.continue_with = continue_with

    def call_function(self, target, args, kwargs):
        if target is not CALL_DELEGATE:
            return super().call_function(target, args, kwargs)
        lowered, *inputs = args
        blob = DelegateBlob.from_bytes(lowered.processed_bytes)
        if blob.tosa is None:
            raise ValueError("delegate has no embedded TOSA graph; compile with embed_tosa=True")
        ref = lowered.original_module.module()(*inputs)
        ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
        raw = run_tosa(
            blob.tosa, [torch.from_numpy(logical_to_npu(t, s)) for t, s in zip(inputs, blob.inputs)]
        )
        tosa_out = []
        for spec, arr in zip(blob.outputs, raw):
            tosa_out.append(npu_to_logical(np.asarray(arr), spec))
        lsb = [
            int((a.to(torch.int64) - b.to(torch.int64)).abs().max().item()) if a.numel() else 0
            for a, b in zip(tosa_out, ref)
        ]
        self.results.append(DelegateNumerics(lowered_name_of(self, lowered), lsb, tosa_out, ref))
        chosen = tosa_out if self.continue_with == "tosa" else ref
        return tuple(chosen)


def lowered_name_of(interp: Interpreter, lowered) -> str:
    for name, mod in interp.module.named_children():
        if mod is lowered:
            return name
    return "delegate"


def _module(program):
    """A runnable module: from a program manager, an ExportedProgram, or a module already made
    (pass the same module on every call to carry mutable state such as buffers)."""
    if hasattr(program, "exported_program"):
        program = program.exported_program()
    return (
        program.module()
        if hasattr(program, "module") and not isinstance(program, torch.nn.Module)
        else program
    )


def check_delegates(program_or_manager, inputs: Sequence[torch.Tensor]) -> List[DelegateNumerics]:
    """Per-delegate TOSA-vs-reference numerics, each on the reference model's own inputs."""
    gm = _module(program_or_manager)
    checker = _DelegateChecker(gm, continue_with="reference")
    checker.run(*inputs)
    return checker.results


def run_program_on_tosa(program_or_manager, inputs: Sequence[torch.Tensor]) -> Any:
    """Run the whole lowered program with every delegate executed by the TOSA reference model."""
    gm = _module(program_or_manager)
    return _DelegateChecker(gm, continue_with="tosa").run(*inputs)
