# SPDX-License-Identifier: BSD-3-Clause
"""One Vela driver payload on the Ethos-U55/U65/U85 NPU model (runtime/ethosu_ng/npu_model,
docs/npu-model.md), without a blob or a program: the verified compile, the tests and the
benchmarks run command streams here; the weight decoder too."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ethosu_ng.runtime.host_module import load_host_runtime


class NpuModelError(RuntimeError):
    """The NPU model rejected a payload; the message names the command, register and values."""

    def __init__(self, code: int, message: str):
        self.code = code
        super().__init__(f"NPU model error {code}: {message}")


def npu_model_run(
    payload: bytes,
    weights: bytes,
    scratch: bytearray,
    fast_scratch: Optional[bytearray] = None,
) -> None:
    """Run one Vela driver payload on the NPU model, in place on ``scratch`` (and fast scratch):
    writable buffers (bytearray, numpy arrays).

    Raises ``NpuModelError`` with the model's message for malformed or unsupported streams.
    """
    code, message = load_host_runtime().npu_model_run(payload, weights, scratch, fast_scratch)
    if code != 0:
        raise NpuModelError(code, message)


def npu_model_stats() -> dict:
    """Counters of the last NPU-model run: commands, ops, dmas, macs, aliased_ofm_ops."""
    names = ("commands", "ops", "dmas", "macs", "aliased_ofm_ops")
    return dict(zip(names, load_host_runtime().npu_model_stats()))


def mlw_decode(stream: bytes) -> np.ndarray:
    """Decode one compressed weight stream with the C++ decoder (int16 weights); a malformed
    stream is a ValueError with the decoder's message."""
    return np.frombuffer(load_host_runtime().mlw_decode(stream), dtype=np.int16).copy()
