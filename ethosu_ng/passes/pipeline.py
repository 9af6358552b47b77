# SPDX-License-Identifier: BSD-3-Clause
"""The order our passes run in, the check that it keeps every pass's declared constraints, and
the runner that checks every pass's guarantee after the last pass.

A pass that ``requires`` an aspect of the program runs after every pass that ``modifies`` it
(``base.ProgramPass``); TOSA rewrites declare ``runs_after`` instead, and ``check_order`` reads
both. ``pass_pipeline`` returns the passes to run, without the ones a caller disabled, and raises
``PassOrderError`` if a pass would run before one it must run after. Disabling a pass is allowed:
an ordering constraint binds only passes that run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Tuple, Type

from torch.export import ExportedProgram

from ethosu_ng.passes.avg_pool_ceil_mode import AvgPoolCeilModePass
from ethosu_ng.passes.base import ProgramPass
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

if TYPE_CHECKING:
    from ethosu_ng.compile_spec import EthosUNGCompileSpec

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


class PassContractError(RuntimeError):
    """A pass's guarantee does not hold of the program the pipeline produced."""


def must_run_after(p: type, q: type) -> Optional[str]:
    """Why ``p`` must run after ``q`` (None: it need not): ``q`` is in ``p.runs_after``, or ``q``
    modifies an aspect ``p`` requires."""
    if q is p:
        return None
    if q in getattr(p, "runs_after", ()):
        return "declared"
    shared = getattr(p, "requires", frozenset()) & getattr(q, "modifies", frozenset())
    if shared:
        return f"it reads {', '.join(sorted(a.value for a in shared))} final"
    return None


def check_order(passes: Sequence[type], error: Type[ValueError] = PassOrderError) -> None:
    for k, p in enumerate(passes):
        for j in range(k + 1, len(passes)):
            why = must_run_after(p, passes[j])
            if why is not None:
                raise error(
                    f"{p.__name__} (position {k}) must run after {passes[j].__name__} "
                    f"(position {j}): {why}"
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


def run_passes(
    program: ExportedProgram,
    passes: Sequence[Type[ProgramPass]],
    spec: Optional[EthosUNGCompileSpec] = None,
) -> ExportedProgram:
    """Run ``passes`` in order, then check each one's guarantee on the final program; raises
    ``PassContractError`` naming the pass and the culprit nodes if one does not hold."""
    ran: List[ProgramPass] = []
    for make_pass in passes:
        instance = make_pass(spec)
        program = instance(program)
        ran.append(instance)
    for instance in ran:
        broken = instance.ensures(program)
        if broken:
            raise PassContractError(
                f"{type(instance).__name__}'s guarantee does not hold after the pipeline: "
                + "; ".join(broken[:3])
                + (f" (+{len(broken) - 3} more)" if len(broken) > 3 else "")
            )
    return program
