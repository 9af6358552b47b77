# SPDX-License-Identifier: BSD-3-Clause
"""The NPU model's static hazard check over Vela's real command streams.

The model runs each command to completion in order; the NPU runs a DMA beside the kernels until
a DMA_WAIT or KERNEL_WAIT says otherwise, so a stream can be right on the model and wrong on the
device. The model tracks the bytes every command touches and which commands may still be in
flight, and refuses a command that overlaps one of the other kind (one of them writing). Over
real streams (lookup tables loaded by DMA, weights buffered into SRAM, on each family):

- every stream Vela emits runs without a hazard (no valid stream is refused);
- removing any one wait either leaves the stream safe or is a hazard naming both commands;
- removing every wait from a stream that has DMAs is a hazard.
"""

from __future__ import annotations

import re
import struct
from typing import List

import pytest
from npu_payload import cmd_stream, commands
from test_npu_model import _compiled

from ethosu_ng import runtime as rt

OP_DMA_START, OP_DMA_WAIT, OP_KERNEL_WAIT = 0x010, 0x011, 0x012

# Streams with DMAs: LUT loads (sigmoid, tanh, gelu, softmax), and on ethos-u65-256 (Dedicated_Sram)
# weights buffered into SRAM.
# One case in the fast suite; the others with -m slow.
CASES = [
    ("sigmoid", "ethos-u55-128"),
    *(
        pytest.param(name, target, marks=pytest.mark.slow)
        for name, target in (
            ("softmax", "ethos-u55-128"),
            ("gelu", "ethos-u65-256"),
            ("mobilenetv2_block", "ethos-u65-256"),
            ("tanh", "ethos-u85-256"),
        )
    ),
]


def _run(blob, cmds: List[int]):
    start, _ = cmd_stream(blob.command_stream)
    head = list(struct.unpack(f"<{start}I", blob.command_stream[: 4 * start]))
    tag = head[-1] & 0xFF | ((len(cmds) >> 16) & 0xFF) << 8 | (len(cmds) & 0xFFFF) << 16
    payload = struct.pack(f"<{start + len(cmds)}I", *head[:-1], tag, *cmds)
    fast = bytearray(blob.fast_scratch_size) if blob.fast_scratch_size else None
    rt.npu_model_run(payload, blob.weights, bytearray(blob.scratch_size), fast)


def _waits(words):
    return [
        (k, i)
        for k, i, op, is1, _, _ in commands(words)
        if not is1 and op in (OP_DMA_WAIT, OP_KERNEL_WAIT)
    ]


@pytest.mark.parametrize("name,target", CASES)
def test_removing_a_wait_is_a_hazard_or_harmless(name, target):
    _, blobs, _ = _compiled(name, target)
    hazards = with_dma = 0
    for blob in blobs:
        _, words = cmd_stream(blob.command_stream)
        if not any(op == OP_DMA_START for _, _, op, is1, _, _ in commands(words) if not is1):
            continue
        with_dma += 1
        _run(blob, words)  # Vela's own stream: no hazard
        waits = _waits(words)
        for _, i in waits:
            try:
                _run(blob, words[:i] + words[i + 1 :])
            except rt.NpuModelError as e:
                m = re.search(
                    r"command (\d+) \((NPU_OP_\w+).*hazard: it (?:reads|writes) bytes "
                    r"\[0x[0-9a-f]+, 0x[0-9a-f]+\) of .*, which command (\d+) \((NPU_OP_\w+)\)",
                    str(e),
                )
                assert m, str(e)
                # An earlier command still in flight; one of the two a DMA, the other a kernel.
                assert int(m.group(3)) < int(m.group(1)), str(e)
                assert (m.group(2) == "NPU_OP_DMA_START") != (m.group(4) == "NPU_OP_DMA_START"), (
                    str(e)
                )
                hazards += 1
        with pytest.raises(rt.NpuModelError, match="hazard"):
            _run(blob, [w for n, w in enumerate(words) if n not in {i for _, i in waits}])
    assert with_dma, f"{name} on {target}: no DMA in any stream, nothing to check"
    assert hazards > 0, f"{name} on {target}: no single wait was needed"
