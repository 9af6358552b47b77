"""ethosu_ng: an ExecuTorch backend for Arm Ethos-U NPUs with a typed partition-boundary
contract."""

from .backend import EthosUNGBackend
from .blob import DelegateBlob
from .boundary import BoundaryContractError
from .compile_spec import TARGETS, EthosUNGCompileSpec
from .io_quantization import IOQuantization, ProgramIO, io_quantization
from .partitioner import EthosUNGPartitioner
from .quantizer import EthosUNGQuantizer
from .tensor_spec import TensorSpec

__all__ = [
    "TARGETS",
    "BoundaryContractError",
    "DelegateBlob",
    "EthosUNGBackend",
    "EthosUNGCompileSpec",
    "EthosUNGPartitioner",
    "EthosUNGQuantizer",
    "TensorSpec",
    "IOQuantization",
    "ProgramIO",
    "io_quantization",
]
