# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""The Ethos-U85 command-stream model (runtime/ethosu_ng/npu_model/u85_*.cpp) against the TOSA
reference model.

Every model is exported through the real pipeline (quantize, partition, TOSA, Vela/regor for
Ethos-U85) with ``embed_tosa=True`` and run twice on the same inputs through the C++ runtime:
once on the embedded TOSA graph (TOSA reference model), once on Vela's U85 command stream,
weights and scales on the NPU model. The outputs must be equal bit for bit. CI runs a
representative op set on ethos-u85-256 (one core) and ethos-u85-512 (two cores: one weight
stream per core); ``-m slow`` the rest of tests/npu_models.py and the other three sizes.

Also here: random convolutions (shapes, kernels, strides, dilations, depthwise, every U85 size;
weights encoded by the installed Vela, decoded by the model); what the model does not implement
(resize) falls back to TOSA with the reason; malformed U85 streams are clean errors.
"""

from __future__ import annotations

import os
import struct

import pytest
import torch
from _pte import CrossCheckedMethod, delegate_infos
from conftest import calibration_batches
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from models import AttentionBlock
from npu_models import ALL
from npu_payload import OP_DEPTHWISE, cmd_stream, commands
from test_npu_model import (
    SEEDS,
    _changed_or_error,
    _inputs,
    _random_inputs,
    _run_delegate,
)
from test_npu_model import (
    _compiled as _compiled_verified,
)

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng import runtime as rt
from ethosu_ng.compile_spec import TARGETS
from ethosu_ng.export import lower, quantize
from ethosu_ng.runtime import npu_selection

U85_TARGETS = ("ethos-u85-256", "ethos-u85-512")
OTHER_SIZES = ("ethos-u85-128", "ethos-u85-1024", "ethos-u85-2048")
# What Vela emits here, one model per feature: convolution (SWD and FWD weights, part-kernel and
# depth-first, strides, dilation, 9x9 kernels), depthwise, fully connected, elementwise with
# broadcast and operand scaling, max/average pooling with padding, reduce-sum chains, 8-bit LUTs,
# OFM transposes, chaining, transpose convolution (IFM2-accumulator bias add).
CI_MODELS = (
    "conv_wide",
    "conv_dilated_5x5",
    "depthwise_9x9",
    "linear",
    "add",
    "avg_pool_padded",
    "max_pool_padded",
    "mean",
    "softmax",
    "layer_norm",
    "qkv_heads",
    "transpose_conv",
    "mobilenetv2_block",
    "squeeze_excite",
)
REST = tuple(sorted(set(ALL) - set(CI_MODELS)))


def _compiled(name: str, target: str):
    """Vela's own streams (no verified compile: it would move an operation whose stream the model
    gets wrong to the CPU, hiding the difference from these checks)."""
    return _compiled_verified(name, target, verify_npu=False)


def _delegates(pte: bytes) -> int:
    """Delegates of this backend in the program (compiled with ``verify_npu=False``, see
    ``_compiled``)."""
    from ethosu_ng.adapters.exir import pte_delegate_payloads
    from ethosu_ng.compile_spec import BACKEND_ID

    return sum(backend == BACKEND_ID for backend, _ in pte_delegate_payloads(pte))


def _check(name: str, target: str) -> None:
    pte, blobs, example = _compiled(name, target)
    assert blobs, f"{name}: nothing was delegated"
    assert rt.model_unsupported(pte) is None
    method = CrossCheckedMethod(pte, target)
    assert method.runs_npu_model
    for seed in SEEDS:
        method.execute(_inputs(example, seed), f"{name} {target} seed {seed}")
        assert rt.npu_model_stats()["ops"] > 0, "the NPU model executed no kernel"


@pytest.mark.parametrize("target", U85_TARGETS)
@pytest.mark.parametrize("name", CI_MODELS)
def test_u85_model_bit_exact_to_tosa(name, target):
    _check(name, target)


@pytest.mark.slow
@pytest.mark.parametrize("target", U85_TARGETS)
@pytest.mark.parametrize("name", REST)
def test_u85_model_bit_exact_to_tosa_rest(name, target):
    _check(name, target)


@pytest.mark.slow
@pytest.mark.parametrize("target", OTHER_SIZES)
@pytest.mark.parametrize("name", CI_MODELS)
def test_u85_model_bit_exact_to_tosa_other_sizes(name, target):
    _check(name, target)


@pytest.mark.parametrize("target", U85_TARGETS)
def test_u85_attention_matmul_bit_exact(target):
    """Self-attention with explicit bmm: Vela runs each TOSA MATMUL as a vector product with IFM2
    as the weights (the right-hand side transposed), beside softmax LUTs and chaining."""
    torch.manual_seed(0)
    model, example = AttentionBlock().eval(), AttentionBlock.example()
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=False)
    q = quantize(model, example, spec, calibration=calibration_batches(example))
    pte = lower(q, example, spec)[0].to_executorch().buffer
    assert _delegates(pte) >= 1
    assert rt.model_unsupported(pte) is None
    method = CrossCheckedMethod(pte, target)
    assert method.runs_npu_model
    for seed in SEEDS:
        method.execute(_inputs(example, seed), f"attention {target} seed {seed}")


@pytest.mark.parametrize("target", U85_TARGETS)
@pytest.mark.parametrize("cin, cout, kernel", [(32, 16, 3), (8, 16, 5)])
def test_u85_sparse_weights_bit_exact(cin, cout, kernel, target):
    """Weights with two zeros in every four input channels: Vela encodes them 2:4 sparse
    (WEIGHT_FORMAT bit 4, with or without fast weight decode), whose weight order differs."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(cin, cout, kernel).eval()
    with torch.no_grad():
        conv.weight.view(cout, cin // 4, 4, kernel, kernel)[:, :, :2] = 0
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(1, cin, 10, 10, generator=g),) for _ in range(3)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=False)
    q = quantize(conv, data[0], spec, calibration=data)
    pte = lower(q, data[0], spec)[0].to_executorch().buffer
    assert _delegates(pte) == 1
    from ethosu_ng.adapters.exir import pte_delegate_payloads
    from ethosu_ng.blob import DelegateBlob

    (payload,) = [DelegateBlob.from_bytes(d).command_stream for _, d in pte_delegate_payloads(pte)]
    _, words = cmd_stream(payload)
    formats = {p for _, _, op, is1, p, _ in commands(words) if op == 0x12E and not is1}
    assert formats and all(f & 0x10 for f in formats), formats  # WEIGHT_FORMAT: sparse
    method = CrossCheckedMethod(pte, target)
    assert method.runs_npu_model
    for batch in data[1:]:
        method.execute(batch, f"sparse conv {cin}->{cout} k{kernel} {target}")


# ------------------------------------------------------------------ random convolutions
N_CONVS = int(os.environ.get("ETHOSU_NG_U85_CONV_EXAMPLES", "6"))


@settings(
    max_examples=N_CONVS, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(
    cin=st.integers(1, 96),
    cout=st.integers(1, 80),
    kernel=st.integers(1, 5),
    stride=st.integers(1, 2),
    dilation=st.integers(1, 2),
    depthwise=st.booleans(),
    size=st.sampled_from(U85_TARGETS + OTHER_SIZES),
    seed=st.integers(0, 2**16),
)
def test_u85_random_convolutions_bit_exact(cin, cout, kernel, stride, dilation, depthwise, size,
                                           seed):  # fmt: skip
    """Random weights, encoded by the installed Vela in its U85 weight order and format (SWD or
    fast weight decode, one stream per core), decoded and placed by the model: any weight out of
    place or mis-decoded changes an output against the TOSA graph, which holds the weights as
    they are. Channels up to 96 give several IFM and OFM blocks (the serpentine IFM-block
    order)."""
    torch.manual_seed(seed)
    hw = (kernel - 1) * dilation + 1 + 2 * stride + 3
    conv = torch.nn.Conv2d(
        cin,
        cin if depthwise else cout,
        kernel,
        stride=stride,
        dilation=dilation,
        groups=cin if depthwise else 1,
    ).eval()
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(1, cin, hw, hw, generator=g) * 2,) for _ in range(4)]
    spec = EthosUNGCompileSpec(size, embed_tosa=True, verify_npu=False)
    q = quantize(conv, data[0], spec, calibration=data)
    edge, _ = lower(q, data[0], spec)
    pte = edge.to_executorch().buffer
    assert _delegates(pte) == 1
    assert rt.model_unsupported(pte) is None
    method = CrossCheckedMethod(pte, size)
    assert method.runs_npu_model
    for batch in data[:2]:
        method.execute(batch, f"conv {cin}->{cout} k{kernel} s{stride} d{dilation} dw={depthwise}")
        assert rt.npu_model_stats()["macs"] > 0


# ------------------------------------------------------------------ not implemented
def test_u85_unimplemented_feature_runs_on_tosa_with_the_reason(monkeypatch):
    """A U85 program using something the model does not implement defaults to the TOSA graph.
    Every program of npu_models runs on the model, so the model's verdict is stood in for here
    (a REPLICATE resize, which it refuses); the selection that follows is the real one."""
    pte, _, example = _compiled("upsample_nearest", "ethos-u85-256")
    assert rt.model_unsupported(pte) is None and rt.default_npu_for(pte) == "model"
    reason = "command 12 (NPU_OP_RESIZE 0x01a, param 0x0000): RESIZE mode REPLICATE not modelled"
    monkeypatch.setattr(npu_selection, "model_unsupported", lambda _pte: reason)
    assert rt.default_npu_for(pte) == "tosa"
    assert not CrossCheckedMethod(pte, "ethos-u85-256").runs_npu_model
    assert rt.run_pte(pte, _inputs(example, 0))


# ------------------------------------------------------------------ malformed U85 streams
def _u85_payload(cmds) -> bytes:
    """A COP1 driver payload around raw command words (Ethos-U85-256 optimizer config)."""
    head = [0x31504F43, 0x00000001, (2 << 28) | (1 << 8) | (1 << 4) | 8, 0]
    head.append(0x2 | (len(cmds) & 0xFFFF) << 16)
    return struct.pack(f"<{len(head) + len(cmds)}I", *(head + cmds))


def test_u85_unknown_opcode_names_command_index_and_opcode():
    # 0x10D is the U55's IFM_IB_END, which the U85 does not have.
    payload = _u85_payload([0x100 | (1 << 16), 0x10D | (3 << 16)])
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(payload, b"\0" * 64, bytearray(256))
    assert "command 1 " in str(info.value) and "unknown cmd0 opcode" in str(info.value)


def test_u85_optimizer_config_of_an_unknown_size_is_refused():
    payload = bytearray(_u85_payload([0]))
    struct.pack_into("<I", payload, 8, (2 << 28) | 12)  # 4096 MACs/cc: no such U85
    with pytest.raises(rt.NpuModelError, match="not an Ethos-U85 size"):
        rt.npu_model_run(bytes(payload), b"\0" * 64, bytearray(256))


def _rewrite(payload: bytes, start: int, at: int, word: int) -> bytes:
    out = bytearray(payload)
    struct.pack_into("<I", out, 4 * (start + at), word)
    return bytes(out)


def test_u85_truncated_fast_weight_stream_is_an_error():
    """A fast-weight-decode stream shorter than its header plus the codes the kernel needs."""
    _, blobs, _ = _compiled("conv_wide", "ethos-u85-256")
    blob = blobs[0]
    start, words = cmd_stream(blob.command_stream)
    WEIGHT_LENGTH, WEIGHT_FORMAT = 0x021, 0x12E
    ops = list(commands(words))
    assert any(op == WEIGHT_FORMAT and not is1 and param & 1 for _, _, op, is1, param, _ in ops)
    at = next(at for _, at, op, is1, _, _ in ops if is1 and op == WEIGHT_LENGTH)
    payload = _rewrite(blob.command_stream, start, at + 1, 48)
    with pytest.raises(rt.NpuModelError, match="fast weight stream of 48 bytes holds fewer"):
        rt.npu_model_run(payload, blob.weights, bytearray(blob.scratch_size))


def test_corrupting_one_u85_command_word_is_seen():
    """Flipping a bit of a register a U85 kernel reads changes the output or is a clean error."""
    _, blobs, _ = _compiled("conv_wide", "ethos-u85-256")
    blob = blobs[0]
    inputs = _random_inputs(blob, 1)
    base = _run_delegate(blob, inputs)
    start, words = cmd_stream(blob.command_stream)
    # OFM_ZERO_POINT, KERNEL_STRIDE, OFM_PRECISION (cmd0); WEIGHT_BASE (cmd1 payload word). Not
    # ACC_FORMAT (32- and 48-bit accumulators agree while sums fit 32 bits), nor OFM_SCALE (a
    # per-channel convolution reads only its rounding mode).
    watched = {(False, 0x118), (False, 0x122), (False, 0x114), (True, 0x020)}
    checked = 0
    for _, at, op, is1, _, _ in commands(words):
        if (is1, op) in watched:
            w = start + at + (1 if is1 else 0)
            word = struct.unpack_from("<I", blob.command_stream, 4 * w)[0]
            # cmd0: parameter bit 0 (signedness, stride, zero point);
            # cmd1: address bit 4.
            payload = _rewrite(blob.command_stream, 0, w, word ^ (0x10 if is1 else 0x10000))
            assert _changed_or_error(blob, inputs, base, payload=payload) != "same", (
                f"flipping a bit of command word {at} (opcode {op:#x}) went unnoticed"
            )
            checked += 1
    assert checked >= 4


# ------------------------------------------------------------------ concatenation class
class ConvReluCatHead(torch.nn.Module):
    """conv (k x k) -> relu -> cat with a second input along channels -> 1x1 conv. The second
    input reaches below zero, so the relu's output zero point is above qmin and the relu stays a
    clamp of its own: Vela fuses it and a TRANSPOSE (NHWC -> NCHW, for the channel concatenation)
    into the conv, whose OFM is then written transposed into the concatenation buffer."""

    def __init__(self, kernel: int = 3, channels: int = 4):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, kernel, padding=kernel // 2)
        self.head = torch.nn.Conv2d(2 * channels, channels, 1)

    def forward(self, x, y):
        return self.head(torch.cat((torch.relu(self.conv(x)), y), 1))


def _conv_relu_cat_head(spec):
    torch.manual_seed(0)
    model = ConvReluCatHead().eval()
    x = (torch.randn(1, 4, 2, 2), torch.rand(1, 4, 2, 2) - 0.5)
    q = quantize(model, x, spec, calibration=[x, (x[0] * 0.5, x[1])], input_dtype=torch.int8,
                 output_dtype=torch.int8)  # fmt: skip
    return q, x


def test_vela_u85_conv_written_transposed_into_a_concatenation_loses_channels():
    """Vela 5.1.0 (and 5.2.0) on ethos-u85-256: the CONV_2D producing the first operand of a
    channel concatenation, with its relu and the NHWC -> NCHW TRANSPOSE fused, is scheduled with
    OFM depth slices [0, 2] of the *transposed* OFM (depth = the map's width, 2) instead of its 4
    output channels (regor asserts the two agree: scheduler.cpp, "There must be either no
    transpose, or single-slice transpose", compiled out in release builds). Its bias/scale stream
    then holds channels 0 and 1 only: the biases of channels 2 and 3 are nowhere in Vela's
    weight data, so no NPU can compute them, and the model (reading zeros) writes the zero point
    there. The verified compile contains it: the stream deviates, the concatenation moves to
    the CPU, and what ships is bit-exact."""
    from ethosu_ng.adapters.exir import pte_delegate_payloads
    from ethosu_ng.blob import DelegateBlob
    from ethosu_ng.tosa_optimize import graph as tosa_graph

    target = "ethos-u85-256"
    unchecked = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=False)
    q, x = _conv_relu_cat_head(unchecked)
    pte = lower(q, x, unchecked)[0].to_executorch().buffer
    ((_, data),) = pte_delegate_payloads(pte)
    blob = DelegateBlob.from_bytes(data)
    g = tosa_graph.read(blob.tosa)
    conv = next(o for o in g.ops if o.op == "CONV2D")
    bias = g.const_array(conv.inputs[2]).astype("<i4")
    present = [struct.pack("<i", int(b)) in blob.weights for b in bias]
    assert present[:2] == [True, True] and not all(present[2:]), present
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randint(-128, 128, t.shape, generator=gen, dtype=torch.int8) for t in x]
    want = rt.load_pte(pte).method("forward").execute(xs, "tosa")[0]
    got = rt.load_pte(pte).method("forward").execute(xs, "model")[0]
    assert not torch.equal(got, want), "Vela's stream agrees with TOSA: the premise is gone"

    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    edge, part = lower(q, x, spec)
    moved = part.report.compiler_fallback
    assert list(moved) == ["aten_cat_default"], moved
    assert "verified compile: NPU model differs from TOSA" in moved["aten_cat_default"]
    method = CrossCheckedMethod(edge.to_executorch().buffer, target)
    assert method.runs_npu_model
    method.execute(xs, "conv -> relu -> cat -> conv, verified compile")


class DepthwiseReluCat(torch.nn.Module):
    """1x1 depthwise conv -> relu -> cat with a second input along channels (NCHW)."""

    def __init__(self, channels: int):
        super().__init__()
        self.dw = torch.nn.Conv2d(channels, channels, 1, groups=channels)

    def forward(self, x, y):
        return torch.cat((torch.relu(self.dw(x)), y), 1)


def _op_weight_streams(blob, opcode: int):
    """(OFM depth, each core's decoded weight stream) of the first ``opcode`` operation in a U85
    blob's command stream; the streams must sit in the weights region (region 0)."""
    from ethosu_ng.runtime.npu_model import mlw_decode

    _, words = cmd_stream(blob.command_stream)
    r0, r1 = {}, {}
    for _, _, op, is1, param, data in commands(words):
        if is1:
            r1[op] = data
        elif op != opcode:
            r0[op] = param
        else:
            assert r0.get(0x128, 0) & 7 == 0, "weights DMA'd to scratch: not traced here"
            streams = []
            # SET_WEIGHT{,1,2,3}_BASE / _LENGTH
            for base, length in ((0x020, 0x021), (0x090, 0x091), (0x092, 0x093), (0x094, 0x095)):
                if r1.get(length):
                    at = r1[base]
                    streams.append(mlw_decode(bytes(blob.weights[at : at + r1[length]])))
            return r0[0x113] + 1, streams  # SET_OFM_DEPTH_M1
    raise AssertionError(f"no operation {opcode:#x} in the command stream")


@pytest.mark.parametrize(
    "target",
    [
        "ethos-u85-512",
        pytest.param("ethos-u85-1024", marks=pytest.mark.slow),
        pytest.param("ethos-u85-2048", marks=pytest.mark.slow),
    ],
)
def test_vela_u85_depthwise_written_transposed_encodes_weights_past_its_channels(target):
    """Vela 5.1.0 on the multi-core U85 sizes: the DEPTHWISE_CONV2D (4 channels, 5 x 6 map)
    producing the first operand of a channel concatenation, written transposed into it (the class
    above), has its weights encoded for the transposed OFM's depth, the map's width (6), not its
    OFM_DEPTH (4). The U85 order gives each core 4 channels in turn, so channels 4 and 5 are the
    first two slots of core 1's stream, which regor fills from past the end of the 4-weight tensor
    (bytes that change from compile to compile); channels 6 and 7 it pads with zeros. The NPU
    writes no channel beyond OFM_DEPTH, but a stream encoded for another depth is Vela's fault,
    not a valid stream: the model refuses it (a padding slot must hold zero, as regor writes it
    for every channel the tensor has not), naming the op. The verified compile moves the
    concatenation to the CPU, and what ships is bit-exact (Vela 5.2.0 the same)."""
    from ethosu_ng.adapters.exir import pte_delegate_payloads
    from ethosu_ng.blob import DelegateBlob
    from ethosu_ng.runtime.npu_model import NpuModelError, npu_model_run
    from ethosu_ng.tosa_optimize import graph as tosa_graph

    torch.manual_seed(0)
    model = DepthwiseReluCat(4).eval()
    x = (torch.randn(1, 4, 5, 6), torch.rand(1, 4, 5, 6) - 0.5)
    unchecked = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=False)
    q = quantize(model, x, unchecked, calibration=[x, (x[0] * 0.5, x[1])],
                 input_dtype=torch.int8, output_dtype=torch.int8)  # fmt: skip
    pte = lower(q, x, unchecked)[0].to_executorch().buffer
    ((_, data),) = pte_delegate_payloads(pte)
    blob = DelegateBlob.from_bytes(data)
    g = tosa_graph.read(blob.tosa)
    dw = next(o for o in g.ops if o.op == "DEPTHWISE_CONV2D")
    weights = g.const_array(dw.inputs[1]).reshape(-1).tolist()
    depth, streams = _op_weight_streams(blob, OP_DEPTHWISE)
    assert depth == 4 and len(streams) >= 2, (depth, len(streams))
    # Core 0's first slots are channels 0-3 in the model's order: its slot order agrees.
    assert streams[0][:4].tolist() == weights, (streams[0][:4].tolist(), weights)
    assert not streams[1][2:].any(), "core 1 holds more than channels 4 and 5"
    # The bytes past the tensor are whatever regor's memory holds (non-zero in every compile
    # measured); where they happen to be zero the stream is a valid one, and nothing moves.
    garbage = bool(streams[1][:2].any())
    fast = bytearray(blob.fast_scratch_size) if blob.fast_scratch_size else None
    if garbage:
        with pytest.raises(NpuModelError) as refused:
            npu_model_run(blob.command_stream, blob.weights, bytearray(blob.scratch_size), fast)
        msg = str(refused.value)
        assert (
            "NPU_OP_DEPTHWISE" in msg and "weight stream 1 has a non-zero value in padding" in msg
        )

    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    edge, part = lower(q, x, spec)
    moved = part.report.compiler_fallback
    if garbage:
        assert list(moved) == ["aten_cat_default"], moved
        assert "weight stream 1 has a non-zero value in padding" in moved["aten_cat_default"], moved
    else:
        assert not moved, moved
    method = CrossCheckedMethod(edge.to_executorch().buffer, target)
    assert method.runs_npu_model
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randint(-128, 128, t.shape, generator=gen, dtype=torch.int8) for t in x]
    method.execute(xs, f"depthwise -> relu -> cat on {target}, verified compile")


class ConcatGraph(torch.nn.Module):
    """``cat`` of operands along ``axis`` (NCHW), each an input as it is, a 1x1 conv, or a padded
    3x3 conv -> relu; then nothing, a 1x1 conv over the result's channels, a permute to NHWC, a
    slice of the concatenated axis, a channel split (both halves), or a flip."""

    def __init__(self, producers, axis, channels, after):
        super().__init__()
        self.axis, self.after = axis, after
        self.producers = torch.nn.ModuleList(
            torch.nn.Identity()
            if p == "input"
            else torch.nn.Conv2d(c, c, 1)
            if p == "conv1x1"
            else torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.ReLU())
            for p, c in zip(producers, channels)
        )
        out_c = sum(channels) if axis == 1 else channels[0]
        self.head = torch.nn.Conv2d(out_c, 4, 1) if after == "head" else None

    def forward(self, *xs):
        y = torch.cat([p(x) for p, x in zip(self.producers, xs)], self.axis)
        if self.after == "head":
            return self.head(y)
        if self.after == "permute":
            return y.permute(0, 2, 3, 1)
        if self.after == "slice":
            return y.narrow(self.axis, 1, y.shape[self.axis] - 1)
        if self.after == "split":
            return torch.split(y, [y.shape[1] // 2, y.shape[1] - y.shape[1] // 2], 1)
        if self.after == "flip":
            return torch.flip(y, [self.axis])
        return y


@st.composite
def concat_cases(draw):
    dtype = draw(st.sampled_from(["int8", "int16"]))
    n = draw(st.integers(2, 4))
    axis = draw(st.integers(1, 3))
    base = [1, draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 6))]
    shapes = []
    for _ in range(n):
        s = list(base)
        s[axis] = draw(st.integers(1, 5))
        shapes.append(tuple(s))
    # Convolutions on int16 programs have 16-bit IFMs, which the U85 model does not implement.
    kinds = ["input"] if dtype == "int16" else ["input", "conv1x1", "conv3x3relu"]
    producers = [draw(st.sampled_from(kinds)) for _ in range(n)]
    afters = ["none", "permute", "slice", "flip"] + (["head", "split"] if dtype == "int8" else [])
    after = draw(st.sampled_from(afters))
    if after == "split" and (sum(s[1] for s in shapes) if axis == 1 else base[1]) < 2:
        after = "none"
    return dict(
        dtype=dtype,
        axis=axis,
        shapes=shapes,
        producers=producers,
        after=after,
        y_below=draw(st.sampled_from([0.0, 0.3, 0.6])),
        target=draw(st.sampled_from(("ethos-u85-128", "ethos-u85-256", "ethos-u85-512"))),
        seed=draw(st.integers(0, 2**16)),
    )


N_CONCATS = int(os.environ.get("ETHOSU_NG_U85_CONCAT_EXAMPLES", "10"))


@settings(
    max_examples=N_CONCATS,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
    phases=[Phase.generate],  # an example compiles for ~30 s: report the case, do not shrink it
)
@given(case=concat_cases())
def test_u85_concatenations_ship_bit_exact(case):
    """The concatenation class on three U85 sizes, int8 and int16: what the verified compile ships
    runs bit-exact on the U85 model against the TOSA reference model (no ``NotSupported``), and
    every delegate's stream was checked on the model at compile time.
    Vela's deviation on a conv written transposed into a concatenation (above) is drawn here
    (a conv operand of a concatenation consumed by another op); the verified compile moves the
    ``cat`` to the CPU, and nothing else may move."""
    torch.manual_seed(case["seed"])
    channels = [s[1] for s in case["shapes"]]
    model = ConcatGraph(case["producers"], case["axis"], channels, case["after"]).eval()
    gen = torch.Generator().manual_seed(case["seed"])

    def batch(scale):
        return tuple(
            (torch.rand(s, generator=gen) - case["y_below"]) * scale for s in case["shapes"]
        )

    calib = [batch(2.0), batch(1.0)]
    spec = EthosUNGCompileSpec(case["target"], embed_tosa=True)
    dtype = getattr(torch, case["dtype"])
    q = quantize(model, calib[0], spec, calibration=calib, input_dtype=dtype,
                 output_dtype=dtype, activation_dtype=dtype)  # fmt: skip
    edge, part = lower(q, calib[0], spec)
    verdicts = [i.npu_verification for i in delegate_infos(edge)]
    assert verdicts, f"nothing delegated: {part.report.cpu_reasons} {case}"
    assert all(v.status == "verified" for v in verdicts), (verdicts, case)
    # Only Vela's deviation may move ops, and its culprit is the concatenation: a model error
    # on any other op would move that op instead.
    moved = part.report.compiler_fallback
    assert all(n.startswith("aten_cat") for n in moved), (moved, case)
    pte = edge.to_executorch().buffer
    assert rt.model_unsupported(pte) is None, (rt.model_unsupported(pte), case)
    method = CrossCheckedMethod(pte, case["target"])
    assert method.runs_npu_model
    info = torch.iinfo(dtype)
    for k in range(2):
        xs = [torch.randint(info.min, info.max + 1, s, generator=gen, dtype=dtype)
              for s in case["shapes"]]  # fmt: skip
        method.execute(xs, f"{case} input {k}")


# ------------------------------------------------------------------ the zoo
def _zoo_models():
    import json

    path = os.path.join(os.path.dirname(__file__), "..", "docs", "zoo.json")
    with open(path) as f:
        return sorted({row["model"] for row in json.load(f)})


ZOO_U85_TARGETS = tuple(t for t in TARGETS if t.startswith("ethos-u85-"))


@pytest.mark.slow
@pytest.mark.parametrize("target", ZOO_U85_TARGETS)
@pytest.mark.parametrize("model_spec", _zoo_models())
def test_u85_zoo_ships_bit_exact_on_the_model(model_spec, target):
    """Every zoo model (docs/zoo.json) compiled for every U85 size with the default settings
    (verified compile on) runs on the U85 model by default, bit-exact to the TOSA reference
    model on two input batches. Prints one line per case (docs/reliability.md keeps the
    figures)."""
    from _pte import zoo_case_on_u85_model
    from _tools import require_tool

    require_tool("timm", module=True, install="pip install -e .[zoo]")
    print(zoo_case_on_u85_model(model_spec, target))
