"""The order our passes run in, and the check that it keeps every pass's declared constraints.

Each pass class may declare ``runs_after``: the passes whose result it relies on (e.g. the Q/DQ
commute needs final qparams, so it runs after every pass that sets them). ``pass_pipeline``
returns the passes to run, without the ones a caller disabled, and raises ``PassOrderError``
if a pass would run before one it declares it runs after. Disabling a pass is allowed: an
ordering constraint binds only passes that run.
"""

from __future__ import annotations

from typing import Iterable, Sequence, Tuple, Type

from ethosu_ng.passes.commute_qdq_through_passthrough import CommuteQDQThroughPassThroughPass
from ethosu_ng.passes.fold_quantized_constants import FoldQuantizedConstantsPass
from ethosu_ng.passes.integer_program_io import IntegerProgramIOPass
from ethosu_ng.passes.lower_roll import LowerRollPass
from ethosu_ng.passes.mark_quantized_islands import MarkQuantizedIslandsPass
from ethosu_ng.passes.quantize_state_buffers import QuantizeStateBuffersPass
from ethosu_ng.passes.requantize_non_fuseable_activation import RequantizeNonFuseableActivationPass
from ethosu_ng.passes.signed_interior import SignedInteriorPass
from ethosu_ng.passes.slice_on_merged_axis import SliceOnMergedAxisPass
from ethosu_ng.passes.unify_concat_qparams import UnifyConcatQParamsPass

# Run on the ATen program before decomposition (in transform_for_pre_decomposition).
PRE_PARTITION_PASSES: Tuple[type, ...] = (
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
)


class PassOrderError(ValueError):
    """A pass would run before a pass it declares it runs after, or an unknown pass was named."""


def check_order(passes: Sequence[type]) -> None:
    position = {p: k for k, p in enumerate(passes)}
    for k, p in enumerate(passes):
        for before in getattr(p, "runs_after", ()):
            if before in position and position[before] > k:
                raise PassOrderError(
                    f"{p.__name__} (position {k}) must run after {before.__name__} "
                    f"(position {position[before]})"
                )


def pass_pipeline(disabled: Iterable[Type] = ()) -> Tuple[type, ...]:
    """``PRE_PARTITION_PASSES`` without ``disabled``, order-checked."""
    disabled = tuple(disabled)
    unknown = [d for d in disabled if d not in PRE_PARTITION_PASSES]
    if unknown:
        names = [getattr(d, "__name__", repr(d)) for d in unknown]
        known = [p.__name__ for p in PRE_PARTITION_PASSES]
        raise PassOrderError(
            f"disabled_passes names no pass of the pipeline: {names} (known: {known})"
        )
    passes = tuple(p for p in PRE_PARTITION_PASSES if p not in disabled)
    check_order(passes)
    return passes
