# SPDX-License-Identifier: BSD-3-Clause
"""The order our passes run in, and the check that it keeps every pass's declared constraints.

Each pass class may declare ``runs_after``: the passes whose result it relies on (e.g. the Q/DQ
commute needs final qparams, so it runs after every pass that sets them). ``pass_pipeline``
returns the passes to run, without the ones a caller disabled, and raises ``PassOrderError``
if a pass would run before one it declares it runs after. Disabling a pass is allowed: an
ordering constraint binds only passes that run.
"""

from __future__ import annotations

from typing import Iterable, Sequence, Tuple, Type

from ethosu_ng.passes.avg_pool_ceil_mode import AvgPoolCeilModePass
from ethosu_ng.passes.batch_into_channels import BatchIntoChannelsPass
from ethosu_ng.passes.commute_qdq_through_passthrough import CommuteQDQThroughPassThroughPass
from ethosu_ng.passes.contiguous_before_view import ContiguousBeforeViewPass
from ethosu_ng.passes.conv3d_on_cpu import Conv3dOnCpuPass
from ethosu_ng.passes.cpu_index_int64 import CpuIndexInt64Pass
from ethosu_ng.passes.fold_quantized_constants import FoldQuantizedConstantsPass
from ethosu_ng.passes.integer_program_io import IntegerProgramIOPass
from ethosu_ng.passes.lower_roll import LowerRollPass
from ethosu_ng.passes.mark_quantized_islands import MarkQuantizedIslandsPass
from ethosu_ng.passes.nearest_resize_indices import NearestResizeIndicesPass
from ethosu_ng.passes.non_core_aten_ops import DecomposeNonCoreAtenPass
from ethosu_ng.passes.quantize_state_buffers import QuantizeStateBuffersPass
from ethosu_ng.passes.requantize_non_fuseable_activation import RequantizeNonFuseableActivationPass
from ethosu_ng.passes.signed_interior import SignedInteriorPass
from ethosu_ng.passes.slice_on_merged_axis import SliceOnMergedAxisPass
from ethosu_ng.passes.unify_concat_qparams import UnifyConcatQParamsPass

# Run on the ATen program before decomposition (in transform_for_pre_decomposition).
PRE_PARTITION_PASSES: Tuple[type, ...] = (
    ContiguousBeforeViewPass,
    AvgPoolCeilModePass,
    NearestResizeIndicesPass,
    BatchIntoChannelsPass,
    LowerRollPass,
    SliceOnMergedAxisPass,
    QuantizeStateBuffersPass,
    SignedInteriorPass,
    IntegerProgramIOPass,
    FoldQuantizedConstantsPass,
    RequantizeNonFuseableActivationPass,
    UnifyConcatQParamsPass,
    CommuteQDQThroughPassThroughPass,
    MarkQuantizedIslandsPass,
    DecomposeNonCoreAtenPass,
    CpuIndexInt64Pass,
    Conv3dOnCpuPass,
)


class PassOrderError(ValueError):
    """A pass would run before a pass it declares it runs after, or an unknown pass was named."""


def check_order(passes: Sequence[type], error: Type[ValueError] = PassOrderError) -> None:
    position = {p: k for k, p in enumerate(passes)}
    for k, p in enumerate(passes):
        for before in getattr(p, "runs_after", ()):
            if before in position and position[before] > k:
                raise error(
                    f"{p.__name__} (position {k}) must run after {before.__name__} "
                    f"(position {position[before]})"
                )


def ordered_without(
    steps: Sequence[type],
    disabled: Iterable[Type],
    kind: str,
    error: Type[ValueError] = PassOrderError,
) -> Tuple[type, ...]:
    """``steps`` without ``disabled``, order-checked; a disabled name that is not one of the
    steps is an ``error`` naming it (``kind``: what the steps are, for the message). Shared by
    the FX passes and the TOSA rewrites (``tosa_optimize/pipeline.py``)."""
    disabled = tuple(disabled)
    unknown = [d for d in disabled if d not in steps]
    if unknown:
        names = [getattr(d, "__name__", repr(d)) for d in unknown]
        known = [p.__name__ for p in steps]
        raise error(f"disabled names no {kind}: {names} (known: {known})")
    kept = tuple(p for p in steps if p not in disabled)
    check_order(kept, error)
    return kept


def pass_pipeline(disabled: Iterable[Type] = ()) -> Tuple[type, ...]:
    """``PRE_PARTITION_PASSES`` without ``disabled``, order-checked."""
    return ordered_without(PRE_PARTITION_PASSES, disabled, "pass of the pipeline")
