"""ethosu_ng: an ExecuTorch backend for Arm Ethos-U NPUs with a typed partition-boundary
contract."""

from ethosu_ng.backend import EthosUNGBackend
from ethosu_ng.blob import DelegateBlob
from ethosu_ng.compile_spec import TARGETS, EthosUNGCompileSpec
from ethosu_ng.io_quantization import IOQuantization, ProgramIO, io_quantization
from ethosu_ng.partitioner import EthosUNGPartitioner
from ethosu_ng.partitioning.boundary import BoundaryContractError
from ethosu_ng.quantizer import EthosUNGQuantizer
from ethosu_ng.tensor_spec import TensorSpec

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
