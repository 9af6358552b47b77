# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""The Ethos-U85 model on the operations Vela emits for int16 activations and beyond the int8
convolution set: 16-bit IFMs for convolution, depthwise, fully connected, pooling and
elementwise (a16w8: int16 activations, int8 weights, 48-bit accumulators), 16-bit LUTs,
NPU_OP_RESIZE (nearest, bilinear, align_corners), comparisons, bitwise logic and shifts.

Each case is exported through the real pipeline (quantize, partition, TOSA, Vela for the U85
size drawn) with ``embed_tosa=True`` and Vela's own stream (no verified compile, which would move
an operation the model gets wrong to the CPU), checked to contain the feature it is drawn for,
and run on the NPU model and on the TOSA reference model on the same inputs: every delegate
output equal bit for bit. Also: a small a16w8 transformer block, and a convolution whose weight
positions outnumber what its streams can hold is refused before any position table is built.
"""

from __future__ import annotations

import inspect
import os
import struct
import time

import pytest
import torch
from _pte import CrossCheckedMethod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_payload import cmd_stream, commands
from torch import nn

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng import runtime as rt
from ethosu_ng.adapters.exir import pte_delegate_payloads
from ethosu_ng.compile_spec import BACKEND_ID
from ethosu_ng.export import lower, quantize

SIZES = ("ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024")

# Operations on quantized (float) inputs; the value says which stream feature must appear.
FLOAT_KINDS = {
    "conv": "conv16",  # 16-bit IFM conv: only in the int16 programs
    "conv_strided": "conv16",
    "depthwise": "conv16",
    "linear": "conv16",
    "max_pool": "pool",
    "avg_pool": "pool",
    "add": "elementwise",
    "mul": "elementwise",
    "sigmoid": "lut",
    "softmax": "lut",
    "resize_nearest": "resize",
    "resize_bilinear": "resize",
    "resize_bilinear_ac": "resize",
    "where_gt": "compare",
    "where_eq": "compare",
    "where_and": "logic",
    # One program through several of them: resize both ways, a comparison, a depthwise, a LUT.
    "combo": {"resize", "compare", "conv16", "lut"},
}
# Operations on integer tensors of the drawn dtype.
INT_KINDS = {
    "shr": "shift",
    "bitwise_and": "logic",
    "bitwise_xor": "logic",
    "bitwise_not": "logic",
}
KINDS = sorted(FLOAT_KINDS) + sorted(INT_KINDS)

OP_CONV, OP_DEPTHWISE, OP_POOL, OP_ELEMENTWISE, OP_RESIZE = 0x002, 0x003, 0x005, 0x006, 0x007
SET_IFM_PRECISION, SET_ACTIVATION = 0x105, 0x125
COMPARE_MODES = {16, 17, 18, 19}
LOGIC_MODES = {33, 34, 35, 36, 42}
SHIFT_MODES = {8, 9, 10}
LUT_S16_S16 = 8


class Op(nn.Module):
    def __init__(self, kind: str, channels: int):
        super().__init__()
        self.kind = kind
        self.conv = nn.Conv2d(channels, channels + 3, 3, padding=1)
        self.conv_strided = nn.Conv2d(channels, 5, 3, stride=2, padding=1)  # any h, w >= 2
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.fc = nn.Linear(channels, 2 * channels + 1)

    def forward(self, x, y):
        k, f = self.kind, nn.functional
        if k == "conv":
            return self.conv(x)
        if k == "conv_strided":
            return self.conv_strided(x)
        if k == "depthwise":
            return self.dw(x)
        if k == "linear":
            return self.fc(x.permute(0, 2, 3, 1))
        if k == "max_pool":
            return f.max_pool2d(x, 2)
        if k == "avg_pool":
            return f.avg_pool2d(x, 3, 1, 1)
        if k == "add":
            return x + y
        if k == "mul":
            return x * y
        if k == "sigmoid":
            return torch.sigmoid(x)
        if k == "softmax":
            return torch.softmax(x, -1)
        if k == "resize_nearest":
            return f.interpolate(x, scale_factor=2, mode="nearest")
        if k == "resize_bilinear":
            return f.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        if k == "resize_bilinear_ac":
            return f.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        if k == "where_gt":
            return torch.where(x > y, x, y)
        if k == "where_eq":
            return torch.where(x == y, x, -y)
        if k == "where_and":
            return torch.where((x > 0) & (y > 0), x, y)
        if k == "combo":
            a = f.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            b = f.interpolate(y, scale_factor=2, mode="nearest")
            return torch.sigmoid(self.dw(torch.where(a > b, a, b)))
        if k == "shr":
            return x >> y
        if k == "bitwise_and":
            return x & y
        if k == "bitwise_xor":
            return x ^ y
        if k == "bitwise_not":
            return ~x + y
        raise ValueError(k)


def _float_inputs(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 2
    y = torch.randn(shape, generator=g) * 2
    y = torch.where(torch.rand(shape, generator=g) < 0.3, x, y)  # equal elements for where_eq
    return x, y


def _int_inputs(kind, shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max + 1, shape, dtype=dtype, generator=g)
    if kind == "shr":
        y = torch.randint(0, info.bits, shape, dtype=dtype, generator=g)
    else:
        y = torch.randint(info.min, info.max + 1, shape, dtype=dtype, generator=g)
    return x, y


def _compile(model, example, target, calibration=None, **quant):
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=False)
    q = quantize(model.eval(), example, spec, calibration=calibration or [example], **quant)
    edge, part = lower(q, example, spec)
    return edge.to_executorch().buffer, part


def _cross_checked(pte: bytes, target: str) -> CrossCheckedMethod:
    """TOSA and the NPU model, bit for bit; the model must run (``with_model`` where
    ``CrossCheckedMethod`` still asks for it: U85 programs that default to TOSA)."""
    opt = (
        {"with_model": True}
        if "with_model" in inspect.signature(CrossCheckedMethod).parameters
        else {}
    )
    method = CrossCheckedMethod(pte, target, **opt)
    assert method.runs_npu_model
    return method


def stream_features(pte: bytes) -> set:
    """What this backend's delegates ask of the NPU: conv16 (a convolution or depthwise with a
    16-bit IFM), pool, elementwise, lut (LUT_S16_S16), resize, compare, logic, shift."""
    found = set()
    for backend, payload in pte_delegate_payloads(pte):
        if backend != BACKEND_ID:
            continue
        _, words = cmd_stream(DelegateBlob.from_bytes(payload).command_stream)
        regs = {}
        for _, _, op, is1, param, _ in commands(words):
            if is1:
                continue
            if op >= 0x100:
                regs[op] = param
                continue
            ifm_bits = 8 << ((regs.get(SET_IFM_PRECISION, 0) >> 2) & 3)
            if (regs.get(SET_ACTIVATION, 0) & 0x1F) == LUT_S16_S16 and op != 0:
                found.add("lut")
            if op in (OP_CONV, OP_DEPTHWISE) and ifm_bits == 16:
                found.add("conv16")
            elif op == OP_POOL:
                found.add("pool")
            elif op == OP_RESIZE:
                found.add("resize")
            elif op == OP_ELEMENTWISE:
                mode = param & 0x3F
                found.add(
                    "compare"
                    if mode in COMPARE_MODES
                    else "logic"
                    if mode in LOGIC_MODES
                    else "shift"
                    if mode in SHIFT_MODES
                    else "elementwise"
                )
    return found


def check_case(kind, dtype, target, channels, h, w, seeds=(0, 1, 2)):
    torch.manual_seed(0)
    model = Op(kind, channels)
    shape = (1, channels, h, w)
    if kind in INT_KINDS:
        example = _int_inputs(kind, shape, dtype, 100)
        pte, part = _compile(model, example, target)
        batches = [_int_inputs(kind, shape, dtype, s) for s in seeds]
    else:
        example = _float_inputs(shape, 100)
        calib = [example, _float_inputs(shape, 101)]
        pte, part = _compile(model, example, target, calib, activation_dtype=dtype)
        batches = [tuple(t * 1.5 for t in _float_inputs(shape, s)) for s in seeds]
    assert part.report.partitions, f"{kind}: nothing was delegated"
    want = (FLOAT_KINDS | INT_KINDS)[kind]
    want = {want} if isinstance(want, str) else set(want)
    if dtype != torch.int16:  # 16-bit convolutions and LUTs only in int16 programs
        want -= {"conv16", "lut"}
    features = stream_features(pte)
    assert want <= features, (kind, dtype, target, features)
    assert rt.model_unsupported(pte) is None, rt.model_unsupported(pte)
    method = _cross_checked(pte, target)
    for seed, batch in zip(seeds, batches):
        method.execute(list(batch), f"{kind} {dtype} {target} {shape} seed {seed}")
        assert rt.npu_model_stats()["ops"] > 0, "the NPU model executed no kernel"


# CI: two programs that hold every new feature family (int16 depthwise and LUT, both resizes, a
# comparison and its bitwise select; a shift), on two sizes.
FAST_CASES = [
    ("combo", torch.int16, "ethos-u85-256", 3, 4, 5),
    ("shr", torch.int8, "ethos-u85-512", 2, 3, 4),
]


@pytest.mark.parametrize("kind, dtype, target, channels, h, w", FAST_CASES)
def test_u85_op_bit_exact_to_tosa(kind, dtype, target, channels, h, w):
    check_case(kind, dtype, target, channels, h, w)


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("ETHOSU_NG_U85_OPS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    kind=st.sampled_from(KINDS),
    dtype=st.sampled_from([torch.int8, torch.int16]),
    target=st.sampled_from(SIZES),
    channels=st.integers(1, 20),
    h=st.integers(2, 9),
    w=st.integers(2, 9),
)
def test_u85_ops_bit_exact_to_tosa(kind, dtype, target, channels, h, w):
    check_case(kind, dtype, target, channels, h, w, seeds=(0, 1))


class EncoderBlock(nn.Module):
    """A pre-norm transformer encoder block: layer norm, multi-head attention (explicit bmm),
    residual, layer norm, GELU MLP, residual."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        h, d = self.heads, c // self.heads
        qkv = self.qkv(self.n1(x)).reshape(b, n, 3, h, d).permute(2, 0, 3, 1, 4)
        q, k, v = (t.reshape(b * h, n, d) for t in (qkv[0], qkv[1], qkv[2]))
        att = (torch.bmm(q, k.transpose(1, 2)) * d**-0.5).softmax(-1)
        out = torch.bmm(att, v).reshape(b, h, n, d).permute(0, 2, 1, 3).reshape(b, n, c)
        x = x + self.proj(out)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.n2(x))))


@pytest.mark.slow
def test_u85_a16w8_encoder_block_bit_exact():
    """int16 activations, int8 weights on ethos-u85-256: one delegate, every kernel on the
    model (16-bit convolutions and matmuls, 16-bit LUTs), bit-exact to TOSA."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(1, 6, 16, generator=g),) for _ in range(3)]
    pte, part = _compile(
        EncoderBlock(), batches[0], "ethos-u85-256", batches, activation_dtype=torch.int16
    )
    assert len(part.report.partitions) == 1, part.report.cpu_reasons
    assert {"conv16", "lut"} <= stream_features(pte)
    assert rt.model_unsupported(pte) is None, rt.model_unsupported(pte)
    method = _cross_checked(pte, "ethos-u85-256")
    for k, batch in enumerate(batches):
        method.execute([batch[0] * 2], f"a16w8 encoder batch {k}")


# ------------------------------------------------------------------ bounded work
def _u85_conv_payload(ofm_depth, kernel, ifm_depth, weight_length):
    """One NPU_OP_CONV on ethos-u85-256: 1x1 OFM of ``ofm_depth`` 8-bit channels, ``kernel`` x
    ``kernel`` (the OFM 1x1 needs padding-free IFM of that size), ``ifm_depth`` channels, a
    weight stream of ``weight_length`` bytes at 0."""

    def c0(op, param=0):
        return op | (param << 16)

    def c1(op, data, param=0):
        return [op | 0x4000 | (param << 16), data & 0xFFFFFFFF]

    cmds = [
        c0(0x10F, 1),  # IFM_REGION 1
        c0(0x11F, 1),  # OFM_REGION 1
        c0(0x128, 0),  # WEIGHT_REGION 0
        c0(0x129, 0),  # SCALE_REGION 0
        c0(0x104, ifm_depth - 1),
        c0(0x113, ofm_depth - 1),
        c0(0x117, 15),  # OFM_BLK_DEPTH_M1
        c0(0x120, kernel - 1),
        c0(0x121, kernel - 1),
        c0(0x10A, kernel - 1),  # IFM tile 0 as wide and high as the kernel
        c0(0x10B, kernel - 1),
        c0(0x10C, kernel - 1),
        *c1(0x004, ifm_depth),  # IFM_STRIDE_X
        *c1(0x005, ifm_depth * kernel),  # IFM_STRIDE_Y
        *c1(0x014, ofm_depth),  # OFM_STRIDE_X
        *c1(0x015, ofm_depth),  # OFM_STRIDE_Y
        *c1(0x021, weight_length),
        *c1(0x023, 10 * ofm_depth),
        c0(OP_CONV),
        c0(0x000),
    ]
    head = [0x31504F43, 0x00000001, (2 << 28) | (1 << 8) | (1 << 4) | 8, 0]
    head.append(0x2 | (len(cmds) & 0xFFFF) << 16)
    return struct.pack(f"<{len(head) + len(cmds)}I", *(head + cmds))


@pytest.mark.parametrize(
    "ofm_depth, kernel, ifm_depth",
    [(1, 64, 16384), (3, 8, 65536), (2, 64, 4096)],
)
def test_u85_conv_checks_weight_positions_before_building_them(ofm_depth, kernel, ifm_depth):
    """A convolution whose weight order has ~10^8..10^9 positions (a 1..3-channel OFM padded to
    the micro-block, a large kernel and IFM) against a 16-byte weight stream: refused, quickly,
    before a position table of that size exists (the fuzzer's slow units)."""
    payload = _u85_conv_payload(ofm_depth, kernel, ifm_depth, 16)
    scratch = bytearray(kernel * kernel * ifm_depth + 64)
    start = time.process_time()
    with pytest.raises(rt.NpuModelError, match="weight stream|positions"):
        rt.npu_model_run(payload, b"\x00" * 4096, scratch)
    assert time.process_time() - start < 0.5
