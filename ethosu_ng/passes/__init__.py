# SPDX-License-Identifier: BSD-3-Clause
"""ethosu_ng's own graph passes. One pass per module; each docstring says which guarantee it keeps.

They run on the ATen program before decomposition (``EthosUNGPartitioner.
transform_for_pre_decomposition``), in the order of ``pipeline.PRE_PARTITION_PASSES``. Each is a
``base.ProgramPass``: it declares the aspects of the program it modifies and the ones it requires
final, from which ``pipeline.pass_pipeline`` checks the order, and its guarantee as a check that
``pipeline.run_passes`` runs after the last pass.
"""

from ethosu_ng.passes.avg_pool_ceil_mode import AvgPoolCeilModePass
from ethosu_ng.passes.base import Aspect, ProgramPass
from ethosu_ng.passes.batch_into_channels import BatchIntoChannelsPass
from ethosu_ng.passes.commute_qdq_through_passthrough import CommuteQDQThroughPassThroughPass
from ethosu_ng.passes.contiguous_before_view import ContiguousBeforeViewPass
from ethosu_ng.passes.conv3d_on_cpu import Conv3dOnCpuPass
from ethosu_ng.passes.cpu_index_int64 import CpuIndexInt64Pass
from ethosu_ng.passes.fold_quantized_constants import FoldQuantizedConstantsPass
from ethosu_ng.passes.integer_program_io import IntegerProgramIOError, IntegerProgramIOPass
from ethosu_ng.passes.lower_roll import LowerRollPass
from ethosu_ng.passes.mark_quantized_islands import MarkQuantizedIslandsPass
from ethosu_ng.passes.nearest_resize_indices import NearestResizeIndicesPass
from ethosu_ng.passes.non_core_aten_ops import DecomposeNonCoreAtenPass
from ethosu_ng.passes.pipeline import (
    PRE_PARTITION_PASSES,
    PassContractError,
    PassOrderError,
    check_order,
    pass_pipeline,
    run_passes,
)
from ethosu_ng.passes.quantize_state_buffers import QuantizeStateBuffersPass
from ethosu_ng.passes.requantize_non_fuseable_activation import RequantizeNonFuseableActivationPass
from ethosu_ng.passes.signed_interior import SignedInteriorPass
from ethosu_ng.passes.slice_on_merged_axis import SliceOnMergedAxisPass
from ethosu_ng.passes.unify_concat_qparams import UnifyConcatQParamsPass

__all__ = [
    "PRE_PARTITION_PASSES",
    "Aspect",
    "PassContractError",
    "PassOrderError",
    "ProgramPass",
    "check_order",
    "pass_pipeline",
    "run_passes",
    "AvgPoolCeilModePass",
    "BatchIntoChannelsPass",
    "CommuteQDQThroughPassThroughPass",
    "ContiguousBeforeViewPass",
    "Conv3dOnCpuPass",
    "CpuIndexInt64Pass",
    "DecomposeNonCoreAtenPass",
    "FoldQuantizedConstantsPass",
    "IntegerProgramIOError",
    "IntegerProgramIOPass",
    "LowerRollPass",
    "MarkQuantizedIslandsPass",
    "NearestResizeIndicesPass",
    "QuantizeStateBuffersPass",
    "RequantizeNonFuseableActivationPass",
    "SignedInteriorPass",
    "SliceOnMergedAxisPass",
    "UnifyConcatQParamsPass",
]
