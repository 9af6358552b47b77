"""ethosu_ng's own graph passes. One pass per module; each docstring says which guarantee it keeps."""

from .commute_qdq_through_passthrough import CommuteQDQThroughPassThroughPass
from .fold_quantized_constants import FoldQuantizedConstantsPass
from .integer_program_io import IntegerProgramIOError, IntegerProgramIOPass

__all__ = ["CommuteQDQThroughPassThroughPass", "FoldQuantizedConstantsPass", "IntegerProgramIOError", "IntegerProgramIOPass"]
