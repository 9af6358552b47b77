"""ethosu_ng's own graph passes. One pass per module; each docstring says which guarantee it keeps.

They run on the ATen program before decomposition (``EthosUNGPartitioner.
transform_for_pre_decomposition``), in the order of ``PRE_PARTITION_PASSES``.
"""

from .commute_qdq_through_passthrough import CommuteQDQThroughPassThroughPass
from .fold_quantized_constants import FoldQuantizedConstantsPass
from .integer_program_io import IntegerProgramIOError, IntegerProgramIOPass
from .lower_roll import LowerRollPass
from .mark_quantized_islands import MarkQuantizedIslandsPass
from .quantize_state_buffers import QuantizeStateBuffersPass
from .requantize_non_fuseable_activation import RequantizeNonFuseableActivationPass
from .signed_interior import SignedInteriorPass
from .slice_on_merged_axis import SliceOnMergedAxisPass
from .unify_concat_qparams import UnifyConcatQParamsPass

# Order matters: IO re-typing first, then constant folding (sees the final qparams), then the
# rewrites that make upstream's lowering exact, then the Q/DQ commute (it needs final qparams),
# and island marking last: the commute moves quantizes in front of data-movement ops, which makes
# new ``DQ -> op -> Q`` islands (a state buffer's cat read through a reshape) and removes none.
PRE_PARTITION_PASSES = (
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
