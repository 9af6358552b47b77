# SPDX-License-Identifier: BSD-3-Clause
"""TensorSpec: the typed description of one tensor crossing a delegate boundary."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

# The integer dtypes a delegate boundary tensor may have; the blob gives each a dtype code.
BOUNDARY_DTYPES = frozenset(
    {torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32, torch.bool}
)
MAX_RANK = 6  # the shape and dim_order slots of a blob IO entry

# Vela's memory regions (the base-address index the command stream uses).
REGION_WEIGHTS = 0
REGION_SCRATCH = 1
REGION_FAST_SCRATCH = 2
# The dim order of an NHWC (channels-last) rank-4 tensor.
CHANNELS_LAST = (0, 2, 3, 1)


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class TensorSpec:
    """One delegate input or output, as the NPU reads or writes it.

    ``shape`` is in logical (NCHW) order; ``dim_order`` is the memory order the NPU expects
    (``(0, 1, 2, 3)`` is contiguous, ``(0, 2, 3, 1)`` channels-last). ``scale``/``zero_point``
    are the per-tensor quantization parameters (``None`` for a plain integer tensor).
    ``region``/``offset`` say where in the NPU's memory Vela placed it (filled by preprocess).
    """

    dtype: torch.dtype
    shape: Tuple[int, ...]
    dim_order: Tuple[int, ...]
    scale: Optional[float] = None
    zero_point: Optional[int] = None
    region: int = REGION_SCRATCH
    offset: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dim_order", tuple(int(d) for d in self.dim_order))
        if self.dtype not in BOUNDARY_DTYPES:
            raise ValueError(
                f"TensorSpec dtype must be an integer boundary dtype, got {self.dtype}"
            )
        if len(self.shape) > MAX_RANK:
            raise ValueError(f"rank {len(self.shape)} exceeds {MAX_RANK}")
        if sorted(self.dim_order) != list(range(len(self.shape))):
            raise ValueError(
                f"dim_order {self.dim_order} is not a permutation of rank {len(self.shape)}"
            )

    @property
    def elem_size(self) -> int:
        return element_size(self.dtype)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def byte_size(self) -> int:
        return self.numel * self.elem_size

    def describe(self) -> str:
        q = f" scale={self.scale:.6g} zp={self.zero_point}" if self.scale is not None else ""
        return f"{str(self.dtype).replace('torch.', '')}{list(self.shape)}{q}"
