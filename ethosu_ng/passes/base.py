# SPDX-License-Identifier: BSD-3-Clause
"""The one convention every pass over the ATen program follows.

A pass is constructed with the compile spec (``None`` where no target is known, as in a unit
test) and called on an ``ExportedProgram``, which it changes in place and returns. It declares
what it touches, so the pipeline's order is derived and checked rather than remembered:

- ``modifies``: the aspects of the program the pass may change;
- ``requires``: the aspects it reads in their final form. Every pass that modifies one of them
  runs before it (``pipeline.check_order``).
- ``ensures(program)``: the guarantee the pass makes, as a check of the program. The pipeline
  runs every pass's check once all passes have run (``pipeline.run_passes``), so a later pass
  that breaks an earlier pass's guarantee is an error naming both, not a wrong program.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, ClassVar, FrozenSet, List, Optional

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from ethosu_ng.compile_spec import EthosUNGCompileSpec


class Aspect(enum.Enum):
    """A part of the program a pass may change or read in its final form."""

    CONTIGUITY = "which views read a contiguous tensor"
    POOLS_AND_RESIZES = "average pools and resizes"
    SLICES_AND_CATS = "slices and concatenations"
    DATA_MOVEMENT = "data-movement ops (views, permutes, slices, cats, pads, index selects)"
    STATE_BUFFERS = "the quantization of mutable state buffers"
    INTERIOR_DTYPE = "the integer dtype of quantized tensors inside the program"
    PROGRAM_IO = "the dtypes of the program's own inputs and outputs"
    CONSTANTS = "constant subgraphs, folded into quantized constants"
    QPARAMS = "the quantization parameters of quantize/dequantize nodes"
    QDQ_PLACEMENT = "where quantize/dequantize nodes sit around data movement"
    QUANTIZED_MARKS = "the quantized marker upstream's support check reads"
    CORE_ATEN = "which ops are outside core ATen"
    CPU_INDEX_DTYPE = "the index dtype of index ops left on the CPU"
    CPU_CONVOLUTIONS = "convolutions written for ExecuTorch's CPU kernels"


class ProgramPass:
    """Base of every pass in ``pipeline.PRE_PARTITION_PASSES``."""

    modifies: ClassVar[FrozenSet[Aspect]] = frozenset()
    requires: ClassVar[FrozenSet[Aspect]] = frozenset()

    def __init__(self, spec: Optional[EthosUNGCompileSpec] = None):
        self.spec = spec

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        raise NotImplementedError

    def ensures(self, program: ExportedProgram) -> List[str]:
        """Where ``program`` breaks this pass's guarantee: one line per culprit node."""
        return []
