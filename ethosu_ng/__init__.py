# SPDX-License-Identifier: BSD-3-Clause
"""ethosu_ng: an ExecuTorch backend for Arm Ethos-U NPUs with a typed partition-boundary
contract.

``compile``, ``report`` and ``verify`` are the command line's verbs as functions
(``ethosu_ng.api``).

The names whose modules import executorch or torchao are imported on first use, so importing a
submodule (the ``ethosu-ng`` command line) does not run their start-up (torchao logs warnings
through torch) before the command line has set up its logging.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# torch only: imported now (and the function io_quantization must shadow its module's name).
from ethosu_ng.blob import DelegateBlob
from ethosu_ng.io_quantization import IOQuantization, ProgramIO, io_quantization
from ethosu_ng.partitioning.boundary import BoundaryContractError
from ethosu_ng.tensor_spec import TensorSpec

_LAZY = {
    "compile": "ethosu_ng.api",
    "report": "ethosu_ng.api",
    "verify": "ethosu_ng.api",
    "CompileResult": "ethosu_ng.api",
    "Report": "ethosu_ng.api",
    "VerifyResult": "ethosu_ng.api",
    "TARGETS": "ethosu_ng.compile_spec",
    "EthosUNGBackend": "ethosu_ng.backend",
    "EthosUNGCompileSpec": "ethosu_ng.compile_spec",
    "EthosUNGPartitioner": "ethosu_ng.partitioner",
    "EthosUNGQuantizer": "ethosu_ng.quantizer",
    "CalibrationError": "ethosu_ng.export",
}

__all__ = [
    "compile",
    "report",
    "verify",
    "CompileResult",
    "Report",
    "VerifyResult",
    "TARGETS",
    "BoundaryContractError",
    "CalibrationError",
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


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'ethosu_ng' has no attribute {name!r}")
    # The first one asked for loads them all, as an eager import would have.
    for public, home in _LAZY.items():
        globals()[public] = getattr(importlib.import_module(home), public)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from ethosu_ng.api import CompileResult, Report, VerifyResult, compile, report, verify
    from ethosu_ng.backend import EthosUNGBackend
    from ethosu_ng.compile_spec import TARGETS, EthosUNGCompileSpec
    from ethosu_ng.partitioner import EthosUNGPartitioner
    from ethosu_ng.quantizer import EthosUNGQuantizer
