# SPDX-License-Identifier: BSD-3-Clause
"""Pinned Vela deviation on Ethos-U55, found by the drawn convolutional blocks of
``test_tosa_fast.py``: a table op's output transposed into a PAD at the partition's exit.

``conv -> sigmoid -> ZeroPad2d`` with the pad's output leaving the partition: the TOSA graph is
CONV2D, RESCALE, TRANSPOSE (to the NCHW output), TABLE, PAD. Vela fuses the TABLE into the
second step of its two-step transpose and writes that step straight into the padded output, one
average pool per channel, but with the strides of the unpadded tensor: OFM_STRIDE_X 8 where a
padded row is 10 bytes, and channel bases 64 bytes apart where padded channels are 100 apart.
Executed as written, every row after the first lands in the wrong place. Rewriting those four
register values to the padded tensor's (an experiment on the stream, not in the model) makes the
NPU model bit-exact to TOSA, which is how the cause was confirmed.

The verified compile contains it: the pad runs on the CPU, the reason names the deviation, and
the shipped program is right. If the first test fails, Vela changed: re-check and update the
docs (``docs/npu-model.md``, known Vela deviations).
"""

from __future__ import annotations

import struct

import numpy as np
import torch
from _pte import CrossCheckedMethod, lowered_delegates
from torch import nn

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec, io_quantization
from ethosu_ng import runtime as rt
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics import tosa_fast
from ethosu_ng.vela.compiler import compile_tosa

TARGET = "ethos-u55-128"
OFM_BASE0, OFM_STRIDE_X = 0x4010, 0x4014  # cmd1 opcodes (ethos_u55_regs)


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Sigmoid(), nn.ZeroPad2d(1)).eval()
    return model, (torch.randn(1, 3, 8, 8),)


def _run(vela, stream: bytes, x: np.ndarray, shape) -> np.ndarray:
    scratch = bytearray(vela.scratch_size)
    scratch[vela.inputs[0].offset : vela.inputs[0].offset + x.size] = x.tobytes()
    rt.npu_model_run(stream, vela.weights, scratch, None)
    out = vela.outputs[0].offset
    return np.frombuffer(bytes(scratch[out : out + int(np.prod(shape))]), np.int8).reshape(shape)


def test_vela_writes_a_table_transpose_into_a_pad_with_unpadded_strides():
    model, x = _model()
    spec = EthosUNGCompileSpec(TARGET, embed_tosa=True, verify_npu=False)
    edge, _ = lower(quantize(model, x, spec, calibration=[x]), x, spec)
    (tosa,) = [DelegateBlob.from_bytes(b).tosa for b, _, _ in lowered_delegates(edge)]
    vela = compile_tosa(tosa, EthosUNGCompileSpec(TARGET))
    xq = np.random.default_rng(0).integers(-128, 128, size=(1, 3, 8, 8)).astype(np.int8)
    (want,) = tosa_fast.run_graph(tosa_fast.load(tosa), [xq])
    assert want.shape == (1, 4, 10, 10)

    emitted = _run(vela, vela.command_stream, xq, want.shape)
    assert (emitted != want).sum() > 200, "the stream now matches TOSA: the deviation is gone"

    stream = bytearray(vela.command_stream)
    words = struct.unpack(f"<{len(stream) // 4}I", stream)

    def cmd1(opcode, value):
        return [4 * k for k in range(len(words) - 1)
                if words[k] & 0xFFFF == opcode and words[k + 1] == value]  # fmt: skip

    # Channel c of the padded output starts at 1 * 10 + 1 + 100 * c; Vela steps by 64 (8 x 8).
    for c in (1, 2, 3):
        (at,) = cmd1(OFM_BASE0, 11 + 64 * c)
        struct.pack_into("<I", stream, at + 4, 11 + 100 * c)
    at = cmd1(OFM_STRIDE_X, 8)[-1]  # the table step's, in force for all four channels
    struct.pack_into("<I", stream, at + 4, 10)
    np.testing.assert_array_equal(_run(vela, bytes(stream), xq, want.shape), want)


def test_the_verified_compile_keeps_the_pad_off_the_npu():
    model, x = _model()
    spec = EthosUNGCompileSpec(TARGET, embed_tosa=True)
    q = quantize(model, x, spec, calibration=[x])
    edge, part = lower(q, x, spec)
    # aten.pad has no CPU kernel: lower() lowers again with it decomposed (constant_pad_nd)
    (why,) = part.report.compiler_fallback.values()
    assert "NPU model differs from TOSA" in why, part.report.compiler_fallback
    assert set(part.report.cpu_targets.values()) >= {"aten.constant_pad_nd.default"}
    ioq = io_quantization(edge)
    method = CrossCheckedMethod(edge.to_executorch().buffer, TARGET)
    (got,) = method.execute([ioq.inputs[0].quantize(x[0])], "conv -> sigmoid -> pad")
    want = ioq.outputs[0].quantize(q(x[0]))
    assert (got.int() - want.int()).abs().max().item() <= 1
