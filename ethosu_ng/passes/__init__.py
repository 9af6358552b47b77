"""ethosu_ng's own graph passes. One pass per module; each docstring says which guarantee it keeps."""

from .requantize_non_fuseable_activation import RequantizeNonFuseableActivationPass
from .commute_qdq_through_passthrough import CommuteQDQThroughPassThroughPass
from .fold_quantized_constants import FoldQuantizedConstantsPass
from .integer_program_io import IntegerProgramIOError, IntegerProgramIOPass

__all__ = [
    "RequantizeNonFuseableActivationPass","CommuteQDQThroughPassThroughPass", "FoldQuantizedConstantsPass", "IntegerProgramIOError", "IntegerProgramIOPass"]
