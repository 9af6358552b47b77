"""ethosu_ng's own graph passes. One pass per module; each docstring says which guarantee it keeps.

They run on the ATen program before decomposition (``EthosUNGPartitioner.
transform_for_pre_decomposition``), in the order of ``PRE_PARTITION_PASSES``.
"""

from ethosu_ng.passes.commute_qdq_through_passthrough import CommuteQDQThroughPassThroughPass
from ethosu_ng.passes.fold_quantized_constants import FoldQuantizedConstantsPass
from ethosu_ng.passes.integer_program_io import IntegerProgramIOError, IntegerProgramIOPass
from ethosu_ng.passes.lower_roll import LowerRollPass
from ethosu_ng.passes.mark_quantized_islands import MarkQuantizedIslandsPass
from ethosu_ng.passes.quantize_state_buffers import QuantizeStateBuffersPass
from ethosu_ng.passes.requantize_non_fuseable_activation import RequantizeNonFuseableActivationPass
from ethosu_ng.passes.signed_interior import SignedInteriorPass
from ethosu_ng.passes.slice_on_merged_axis import SliceOnMergedAxisPass
from ethosu_ng.passes.unify_concat_qparams import UnifyConcatQParamsPass

# Order matters: IO re-typing first, then constant folding (sees the final qparams), then the
# rewrites that make upstream's lowering exact, and the Q/DQ commute last (it needs final qparams).
PRE_PARTITION_PASSES = (
    LowerRollPass,
    SliceOnMergedAxisPass,
    QuantizeStateBuffersPass,
    SignedInteriorPass,
    IntegerProgramIOPass,
    FoldQuantizedConstantsPass,
    RequantizeNonFuseableActivationPass,
    UnifyConcatQParamsPass,
    MarkQuantizedIslandsPass,
    CommuteQDQThroughPassThroughPass,
)

__all__ = [
    "PRE_PARTITION_PASSES",
    "CommuteQDQThroughPassThroughPass",
    "FoldQuantizedConstantsPass",
    "IntegerProgramIOError",
    "IntegerProgramIOPass",
    "LowerRollPass",
    "MarkQuantizedIslandsPass",
    "QuantizeStateBuffersPass",
    "RequantizeNonFuseableActivationPass",
    "SignedInteriorPass",
    "SliceOnMergedAxisPass",
    "UnifyConcatQParamsPass",
]
