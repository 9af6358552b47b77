# SPDX-License-Identifier: BSD-3-Clause
"""Declared == TOSA == Vela: the cross-check every compiled partition passes before its blob is
written. Any disagreement is a ``BoundaryContractError`` naming the partition, the IO index and
both types; on success each declared TensorSpec gains Vela's placement (region, offset) and the
NPU buffer's dim order."""

from __future__ import annotations

import math
from typing import List, Set

import torch
from tosa.DType import DType

from ethosu_ng.partitioning.boundary import BoundaryContractError
from ethosu_ng.partitioning.delegate_io import DelegateIOSpec
from ethosu_ng.tensor_spec import CHANNELS_LAST, TensorSpec
from ethosu_ng.tosa_graph import TosaTensorInfo
from ethosu_ng.vela.compiler import VelaResult

# The TOSA dtype of each boundary dtype: TOSA has no unsigned types (a uint8 entry is an INT8
# tensor read with RESCALE's unsigned flag); a bool is BOOL, one byte of 0 or 1.
_TOSA_DTYPE_FOR = {
    torch.int8: DType.INT8,
    torch.uint8: DType.INT8,
    torch.int16: DType.INT16,
    torch.uint16: DType.INT16,
    torch.int32: DType.INT32,
    torch.bool: DType.BOOL,
}


def check_io(
    name: str,
    declared: DelegateIOSpec,
    tosa_ins: List[TosaTensorInfo],
    tosa_outs: List[TosaTensorInfo],
    vela: VelaResult,
    nhwc_outputs: Set[int] = frozenset(),
) -> DelegateIOSpec:
    """declared == TOSA == Vela for every input and output; return specs placed by Vela.

    ``nhwc_outputs``: output indices deliberately emitted channels-last by the NPU."""
    placed = {}
    for kind, decl, names, tosa, vel in (
        ("input", declared.inputs, declared.input_names, tosa_ins, vela.inputs),
        ("output", declared.outputs, declared.output_names, tosa_outs, vela.outputs),
    ):
        if not (len(decl) == len(tosa) == len(vel)):
            raise BoundaryContractError(
                f"{name}: {kind} count disagrees: declared {len(decl)} {names}, TOSA {len(tosa)} "
                f"{[t.name for t in tosa]} {[list(t.shape) for t in tosa]}, Vela {len(vel)} "
                f"{[list(v.shape) for v in vel]}"
            )
        out = []
        for k, (d, t, v) in enumerate(zip(decl, tosa, vel)):
            where = f"{name} {kind} {k} ({names[k] if k < len(names) else '?'})"
            want_tosa = _TOSA_DTYPE_FOR.get(d.dtype)
            if t.dtype != want_tosa:
                raise BoundaryContractError(
                    f"{where}: declared {d.dtype} but the TOSA graph {kind} is {t.dtype_name}"
                )
            if v.elem_size != d.elem_size:
                raise BoundaryContractError(
                    f"{where}: declared {d.dtype} ({d.elem_size} B/element) but Vela "
                    f"{'reads' if kind == 'input' else 'writes'} {v.elem_size} B/element"
                )
            if math.prod(t.shape) != d.numel or v.numel != d.numel:
                raise BoundaryContractError(
                    f"{where}: declared shape {list(d.shape)} but TOSA has {list(t.shape)} and "
                    f"Vela {list(v.shape)}"
                )
            want_nhwc = kind == "output" and k in nhwc_outputs
            order = npu_dim_order(d, t, want_nhwc)
            if order is None:
                raise BoundaryContractError(
                    f"{where}: TOSA shape {list(t.shape)} is no layout of declared shape "
                    f"{list(d.shape)}"
                )
            out.append(
                TensorSpec(d.dtype, d.shape, order, d.scale, d.zero_point, v.region, v.offset)
            )
        placed[kind] = out
    return DelegateIOSpec(
        placed["input"], placed["output"], declared.input_names, declared.output_names, vela.summary
    )


def npu_dim_order(d: TensorSpec, t: TosaTensorInfo, want_nhwc: bool = False):
    """The memory order of the NPU buffer, from the TOSA tensor's shape."""
    contiguous = tuple(range(len(d.shape)))
    shape = tuple(t.shape)
    if want_nhwc and len(d.shape) == 4 and shape == tuple(d.shape[i] for i in CHANNELS_LAST):
        return CHANNELS_LAST
    # The declared dim order first: the boundary buffer is laid out in it (upstream's
    # NormalizeDelegateIOLayoutPass), and a shape such as NCHW [1, 3, 3, 3] reads the same as
    # its NHWC permutation, so the shape alone cannot tell the layout.
    if shape == tuple(d.shape[i] for i in d.dim_order):
        return d.dim_order
    if shape == d.shape:
        return contiguous
    if len(shape) != len(d.shape):
        return contiguous  # rank-changing reshape at the boundary: element order is row-major
    return None
