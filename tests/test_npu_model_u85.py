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
from _pte import CrossCheckedMethod
from conftest import calibration_batches
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import AttentionBlock
from npu_models import ALL
from npu_payload import cmd_stream, commands
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
from ethosu_ng.export import lower, quantize

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
# Vela lowers these to something the model does not implement (NPU_OP_RESIZE).
NOT_MODELLED = {"upsample_nearest": "NPU_OP_RESIZE"}
REST = tuple(sorted(set(ALL) - set(CI_MODELS) - set(NOT_MODELLED)))


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
    method = CrossCheckedMethod(pte, target, with_model=True)
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
    method = CrossCheckedMethod(pte, target, with_model=True)
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
    method = CrossCheckedMethod(pte, target, with_model=True)
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
    method = CrossCheckedMethod(pte, size, with_model=True)
    assert method.runs_npu_model
    for batch in data[:2]:
        method.execute(batch, f"conv {cin}->{cout} k{kernel} s{stride} d{dilation} dw={depthwise}")
        assert rt.npu_model_stats()["macs"] > 0


# ------------------------------------------------------------------ not implemented
@pytest.mark.parametrize("name", sorted(NOT_MODELLED))
def test_u85_unimplemented_feature_runs_on_tosa_with_the_reason(name):
    """A U85 program using something the model does not implement defaults to the TOSA graph;
    ``model_unsupported`` names the command, and the verified compile says ``skipped``."""
    pte, _, example = _compiled(name, "ethos-u85-256")
    reason = rt.model_unsupported(pte)
    assert reason is not None and NOT_MODELLED[name] in reason and "command" in reason
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
