# SPDX-License-Identifier: BSD-3-Clause
"""Vela's Ethos-U85 streams for a16w8 graphs (int16 activations, int8 weights) that differ from
their TOSA graphs, each on the smallest graph that shows it, and how the verified compile
contains them: the NPU model runs the stream as the hardware would and sees the difference (or
refuses the stream), the op responsible moves to the CPU, and what ships is bit-exact.

Both are Vela classes docs/npu-model.md ("Vela-vs-TOSA deviations") describes on int8 graphs,
reached here by int16 graphs: a symmetric int16 relu keeps a CLAMP of its own between two
linears (the int8 relu folds into the RESCALE before it), and a 16-bit conv written transposed
into a concatenation takes the fast weight format. The MobileViT block of docs/accuracy.md
("An a16w8 MobileViT block on ethos-u85-256") loses its three CPU ops to these two.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _pte import CrossCheckedMethod
from npu_payload import OP_CONV, cmd_stream, commands

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng import runtime as rt
from ethosu_ng.adapters.exir import pte_delegate_payloads
from ethosu_ng.blob import DelegateBlob
from ethosu_ng.export import lower, quantize
from ethosu_ng.tosa_optimize import graph as tosa_graph

try:
    from ethosu.vela import __version__ as _vela_version
except ImportError:  # pragma: no cover - Vela is a dependency
    _vela_version = "0.0"
VELA_VERSION = tuple(int(p) for p in _vela_version.split(".")[:2])

TARGET = "ethos-u85-256"
# cmd0 opcodes (regor ethos_u85_interface.hpp)
IFM_PAD_BOTTOM, IFM_WIDTH0_M1, IFM_HEIGHT0_M1 = 0x103, 0x10A, 0x10B
OFM_WIDTH_M1, OFM_HEIGHT_M1, OFM_DEPTH_M1, OFM_PRECISION = 0x111, 0x112, 0x113, 0x114
WEIGHT_REGION, WEIGHT_FORMAT = 0x128, 0x12E
# cmd1 opcodes
WEIGHT_BASE, WEIGHT_LENGTH, SCALE_LENGTH = 0x020, 0x021, 0x023


def _first_conv_registers(blob: DelegateBlob):
    """(cmd0 parameters, cmd1 payloads) in force at the stream's first NPU_OP_CONV."""
    _, words = cmd_stream(blob.command_stream)
    r0, r1 = {}, {}
    for _, _, op, is1, param, data in commands(words):
        if is1:
            r1[op] = data
        elif op == OP_CONV:
            return r0, r1
        else:
            r0[op] = param
    raise AssertionError("no NPU_OP_CONV in the command stream")


def _a16w8(model, x, spec):
    """Quantized a16w8 with int16 program IO, so the tests feed extreme int16 values."""
    return quantize(model.eval(), x, spec, calibration=[x, tuple(t * 0.5 for t in x)],
                    activation_dtype=torch.int16, input_dtype=torch.int16,
                    output_dtype=torch.int16)  # fmt: skip


def _extreme_int16(x, seed: int):
    """int16 inputs of ``x``'s shapes, a fifth of them at either end of the range."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in x:
        v = torch.randint(-32768, 32768, t.shape, generator=g, dtype=torch.int32)
        ends = torch.where(torch.rand(t.shape, generator=g) < 0.5, -32768, 32767)
        out.append(torch.where(torch.rand(t.shape, generator=g) < 0.2, ends, v).to(torch.int16))
    return out


def _one_blob(pte: bytes) -> DelegateBlob:
    ((_, data),) = pte_delegate_payloads(pte)
    return DelegateBlob.from_bytes(data)


class LinearReluLinear(torch.nn.Module):
    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.fc1 = torch.nn.Linear(features, hidden)
        self.fc2 = torch.nn.Linear(hidden, features)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_vela_u85_int16_linear_over_a_reshaped_ifm():
    """Vela 5.1.0 on ethos-u85-256, a16w8 ``linear -> relu -> linear`` over (1, 4, 8) (the
    MobileViT block's MLP, fc1 -> relu -> fc2, in small): regor views the four rows as the
    second linear's 2x2 map, and the first linear's kernel reads its own IFM in that view,
    ``IFM_HEIGHT0_M1 1``, ``IFM_WIDTH0_M1 0`` with ``IFM_PAD_BOTTOM 2`` for an OFM of 4x1: input
    rows 0 and 2 are read, OFM rows 2 and 3 come from padding (bias only). The hardware computes
    what the model computes; TOSA computes every row. Vela 5.2.0 re-lays the first linear's
    output out with a POOL and compiles it right (nothing moves). The int16 relu is a CLAMP of
    its own (symmetric: its zero point is not qmin), which is what reaches the class that
    docs/npu-model.md shows on ethos-u55-128 with int8 ``clamp_min``."""
    torch.manual_seed(0)
    model = LinearReluLinear(8, 16)
    x = (torch.randn(1, 4, 8),)
    unchecked = EthosUNGCompileSpec(TARGET, embed_tosa=True, verify_npu=False)
    q = _a16w8(model, x, unchecked)
    pte = lower(q, x, unchecked)[0].to_executorch().buffer
    r0, _ = _first_conv_registers(_one_blob(pte))
    xs = _extreme_int16(x, 1)
    want = rt.load_pte(pte).method("forward").execute(xs, "tosa")[0]
    got = rt.load_pte(pte).method("forward").execute(xs, "model")[0]
    if VELA_VERSION < (5, 2):
        ifm_rows, ofm_rows = r0[IFM_HEIGHT0_M1] + 1, r0[OFM_HEIGHT_M1] + 1
        assert (ifm_rows, r0[IFM_WIDTH0_M1] + 1, r0[IFM_PAD_BOTTOM], ofm_rows) == (2, 1, 2, 4), r0
        assert torch.equal(got[..., :1, :], want[..., :1, :]), "row 0 is read from its own input"
        assert not torch.equal(got, want), "Vela's stream agrees with TOSA: the premise is gone"

    spec = EthosUNGCompileSpec(TARGET, embed_tosa=True)
    edge, part = lower(q, x, spec)
    moved = part.report.compiler_fallback
    if VELA_VERSION < (5, 2):
        assert len(moved) == 1 and "aten_linear" in next(iter(moved)), moved
        assert "NPU model differs from TOSA" in next(iter(moved.values())), moved
    else:
        assert moved == {}, moved
    method = CrossCheckedMethod(edge.to_executorch().buffer, TARGET)
    assert method.runs_npu_model
    for seed in (1, 2):
        method.execute(_extreme_int16(x, seed), "a16w8 linear -> relu -> linear, verified compile")


class ConvReluCat(torch.nn.Module):
    """1x1 conv -> relu -> cat after a second input along channels (NCHW): MobileViT's
    ``conv_proj`` and the concatenation with the block's input, before ``conv_fusion``."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 1)

    def forward(self, x, shortcut):
        return torch.cat((shortcut, torch.relu(self.conv(x))), 1)


def test_vela_u85_int16_conv_written_transposed_encodes_weights_for_the_maps_width():
    """Vela 5.1.0 (and 5.2.0) on ethos-u85-256, a16w8: the 1x1 conv (48 -> 32 channels, 16x16
    map) producing the second operand of a channel concatenation is written transposed into
    it (``OFM_PRECISION`` transpose CHW, the class docs/npu-model.md describes for int8), and
    its fast weight stream is encoded for the transposed OFM's depth, the map's width (16),
    not its 32 output channels: after the 32-byte header, 16 x 64 raw 8-bit weights (one
    64-deep IFM block) holding exactly the weights of channels 0..15, and a bias/scale stream
    of 16 channels (160 bytes). ``OFM_DEPTH_M1`` says 32 channels, whose stream is 2048
    weights: the hardware would read the 1024 bytes after the stream as the weights of
    channels 16..31 (and the bytes after the scale stream as their biases). The model refuses
    the stream, naming the op; the verified compile moves the concatenation to the CPU, and
    what ships is bit-exact."""
    torch.manual_seed(0)
    model = ConvReluCat(48, 32)
    x = (torch.randn(1, 48, 16, 16), torch.randn(1, 32, 16, 16))
    unchecked = EthosUNGCompileSpec(TARGET, embed_tosa=True, verify_npu=False)
    q = _a16w8(model, x, unchecked)
    pte = lower(q, x, unchecked)[0].to_executorch().buffer
    blob = _one_blob(pte)
    r0, r1 = _first_conv_registers(blob)
    assert (r0[OFM_DEPTH_M1] + 1, (r0[OFM_PRECISION] >> 11) & 7) == (32, 6), r0  # CHW
    assert r0[WEIGHT_FORMAT] & 1 and r0[WEIGHT_REGION] & 7 == 0, r0  # fast weights, region 0
    assert r1[SCALE_LENGTH] == 16 * 10, r1  # bias and scale of 16 channels, 10 bytes each
    stream = np.frombuffer(
        bytes(blob.weights[r1[WEIGHT_BASE] : r1[WEIGHT_BASE] + r1[WEIGHT_LENGTH]]), np.uint8
    )
    header = np.unpackbits(stream[:32], bitorder="little")
    assert header[0] == 1 and not header[104:112].any(), "not raw 8-bit weights, zero adjust 0"
    body = stream[32:].view(np.int8)
    assert body.size == 16 * 64, body.size
    g = tosa_graph.read(blob.tosa)
    conv = next(o for o in g.ops if o.op == "CONV2D")
    first16 = g.const_array(conv.inputs[1]).reshape(32, 48)[:16].reshape(-1)  # OHWI
    assert sorted(body[body != 0].tolist()) == sorted(first16[first16 != 0].tolist())
    with pytest.raises(rt.NpuModelError) as refused:
        rt.npu_model_run(blob.command_stream, blob.weights, bytearray(blob.scratch_size))
    assert "NPU_OP_CONV" in str(refused.value)
    assert "fast weight stream of 1056 bytes holds fewer than 2048 8-bit weights" in str(
        refused.value
    )

    spec = EthosUNGCompileSpec(TARGET, embed_tosa=True)
    edge, part = lower(q, x, spec)
    moved = part.report.compiler_fallback
    assert list(moved) == ["aten_cat_default"], moved
    assert "holds fewer than 2048 8-bit weights" in moved["aten_cat_default"], moved
    method = CrossCheckedMethod(edge.to_executorch().buffer, TARGET)
    assert method.runs_npu_model
    method.execute(_extreme_int16(x, 1), "a16w8 conv -> relu -> cat, verified compile")
