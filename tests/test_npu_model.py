# SPDX-License-Identifier: BSD-3-Clause
"""The Ethos-U55/U65 functional model (runtime/ethosu_ng/npu_model/) against the TOSA reference.

Every model is exported through the real pipeline (quantize, partition, TOSA, Vela 5.1.0 or
5.2.0) for ethos-u55-128 and ethos-u65-256 with ``embed_tosa=True``; each .pte is then run twice
on the same inputs through the C++ runtime: once with the host driver running the embedded TOSA
graph on the TOSA reference model, once with it executing Vela's command stream, weights and
scales on the NPU model. The outputs must be equal bit for bit (no tolerance).

Also here: the C++ weight decoder against Vela's own ``mlw_codec.decode``; corrupting one
weight byte, one scale byte or one command word changes the output or yields a clean error;
malformed payloads (unknown opcode, truncated stream, address outside a region) yield an
``NpuModelError`` naming the command index and opcode.
"""

from __future__ import annotations

import os
import struct
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch
from _pte import CrossCheckedMethod
from conftest import calibration_batches
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import ConvSplitBmm
from npu_models import ALL, SLOW
from npu_payload import (
    DMA_DST,
    DMA_DST_REGION,
    DMA_LEN,
    DMA_SRC,
    DMA_SRC_REGION,
    OP_DMA_START,
    WEIGHT_BASE,
    build_payload,
    cmd0,
    cmd1,
    cmd_stream,
    commands,
    streams,
)
from test_random_graphs_keep_the_contract import KINDS as RANDOM_KINDS
from test_random_graphs_keep_the_contract import H, RandomNet, W

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng import runtime as rt
from ethosu_ng.export import lower, quantize

CALL_DELEGATE = torch.ops.higher_order.executorch_call_delegate
TARGETS = ("ethos-u55-128", "ethos-u65-256")
SEEDS = (0, 1, 2)

# Models on which Vela's stream and the TOSA graph disagree (docs/npu-model.md).
DEVIATIONS = {"conv_split_bmm": lambda: (ConvSplitBmm(), ConvSplitBmm.example())}

_cache: Dict[Tuple[str, str, bool], Tuple[bytes, List[DelegateBlob], tuple]] = {}


def _compiled(name: str, target: str, verify_npu: Optional[bool] = None):
    """(pte, delegate blobs, example inputs) for one model and target, compiled once.

    ``verify_npu`` None: the verified compile, except for the deviation cases, which pin Vela's
    own stream (the verified compile would not ship it)."""
    verify = name not in DEVIATIONS if verify_npu is None else verify_npu
    key = (name, target, verify)
    if key not in _cache:
        torch.manual_seed(0)
        model, example = {**ALL, **SLOW, **DEVIATIONS}[name]()
        spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=verify)
        q = quantize(model.eval(), example, spec, calibration=calibration_batches(example))
        edge, _ = lower(q, example, spec)
        gm = edge.exported_program().graph_module
        blobs = [
            DelegateBlob.from_bytes(getattr(gm, n.args[0].target).processed_bytes)
            for n in gm.graph.nodes
            if n.op == "call_function" and n.target is CALL_DELEGATE
        ]
        _cache[key] = (edge.to_executorch().buffer, blobs, example)
    return _cache[key]


def _inputs(example, seed):
    """Random inputs, wide enough (x3) that quantized values saturate at both ends."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=g) * 3 for t in example]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(ALL))
def test_npu_model_bit_exact_to_tosa(name, target):
    pte, blobs, example = _compiled(name, target)
    assert blobs, f"{name}: nothing was delegated"
    method = CrossCheckedMethod(pte, target)
    for seed in SEEDS:
        method.execute(_inputs(example, seed), f"{name} {target} seed {seed}")
        assert rt.npu_model_stats()["ops"] > 0, "the NPU model executed no kernel"


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(SLOW))
def test_npu_model_bit_exact_to_tosa_slow(name, target):
    """Real-sized feature maps (224x224); one seed (the reference model is slow here)."""
    pte, _, example = _compiled(name, target)
    CrossCheckedMethod(pte, target).execute(_inputs(example, 0), f"{name} {target}")


@pytest.mark.parametrize("target", TARGETS)
def test_vela_deviation_matmul_over_aliased_ofm_tiles(target):
    """Pinned Vela 5.1.0 and 5.2.0 (regor) deviation on both targets, found by the NPU model.

    ConvSplitBmm: conv -> split -> bmm(a, a^T) with a = one half of the split. Vela lowers the
    matmul to MUL + REDUCE_SUM per RHS row, each over an OFM area 8 columns wide whose buffer
    holds 4 (OFM_WIDTH 8, WIDTH0 4, OFM_BASE1 == OFM_BASE0): columns 4..7 (products with rows
    of the *other* split half) land on the addresses of columns 0..3. Executed as written, the
    later columns win and the bmm output differs from TOSA; the split output is exact. Dropping
    the aliased columns instead (an experiment, not in the model) makes it bit-exact, which is
    how the cause was confirmed. If this test fails, Vela changed: re-check and update the docs.
    """
    pte, blobs, example = _compiled("conv_split_bmm", target)
    inputs = _inputs(example, 0)
    got = rt.run_pte(pte, inputs, npu="model")
    stats = rt.npu_model_stats()
    want = rt.run_pte(pte, inputs, npu="tosa")
    assert stats["aliased_ofm_ops"] >= 4
    scale = next(o.scale for b in blobs for o in b.outputs if o.shape == tuple(got[0].shape))
    bmm_lsb = ((got[0] - want[0]).abs().max() / scale).round().item()
    # Measured: up to 255 LSB (a saturated int8 output at the wrong end of its range).
    assert bmm_lsb > 1, "the bmm output now matches TOSA: the Vela deviation is gone"
    assert torch.equal(got[1], want[1])


def test_zoo_check_sees_the_vela_deviation():
    """The zoo comparison (bench/zoo_table.py npu_model_one, tests/zoo/test_npu_model_zoo.py)
    can fail: on ConvSplitBmm it reports the bmm output's difference and the aliased kernels,
    and the split output exact; its weight streams decode equal to Vela's."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "bench", "zoo_table.py")
    spec = importlib.util.spec_from_file_location("zoo_table", path)
    zoo_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo_table)
    factory = os.path.join(os.path.dirname(__file__), "models.py") + ":conv_split_bmm"
    r = zoo_table.npu_model_one(factory, "ethos-u55-128", verify_npu=False)
    lsb = [x for d in r["per_delegate"] for x in d["lsb"]]
    assert max(lsb) > 1 and min(lsb) == 0 and r["differing"] > 0, r["per_delegate"]
    assert r["worst_lsb"] > 1 and r["aliased_ofm_ops"] >= 4
    assert r["weight_streams"] >= 1 and r["weight_streams_differing"] == 0


# ------------------------------------------------------------- delegate-level harness
def _run_delegate(
    blob: DelegateBlob,
    inputs: List[bytes],
    weights: Optional[bytes] = None,
    payload: Optional[bytes] = None,
) -> List[bytes]:
    """Run one delegate on the NPU model with raw input bytes; returns raw output bytes."""
    scratch = bytearray(blob.scratch_size)
    for spec, data in zip(blob.inputs, inputs):
        scratch[spec.offset : spec.offset + len(data)] = data
    rt.npu_model_run(
        payload if payload is not None else blob.command_stream,
        weights if weights is not None else blob.weights,
        scratch,
    )
    return [bytes(scratch[s.offset : s.offset + s.byte_size]) for s in blob.outputs]


def _random_inputs(blob: DelegateBlob, seed: int) -> List[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=s.byte_size, dtype=np.uint8).tobytes() for s in blob.inputs]


# ------------------------------------------------------------------ weight decoder
def test_mlw_decoder_matches_vela_on_real_streams():
    from ethosu import mlw_codec

    n_streams = 0
    for name in ("conv_wide", "mobilenetv2_block", "conv_dilated"):
        for target in TARGETS:
            _, blobs, _ = _compiled(name, target)
            for blob in blobs:
                for kind, off, n in streams(blob.command_stream, len(blob.weights)):
                    if kind != "weights":
                        continue
                    stream = blob.weights[off : off + n]
                    ours = rt.mlw_decode(stream)
                    theirs = np.asarray(mlw_codec.decode(bytearray(stream)), dtype=np.int16)
                    np.testing.assert_array_equal(ours, theirs)
                    n_streams += 1
    assert n_streams >= 6


@pytest.mark.parametrize("seed", range(6))
def test_mlw_decoder_matches_vela_on_encoded_random_weights(seed):
    """Vela's encoder on weights with runs of zeros, small and full 9-bit ranges, palettes."""
    from ethosu import mlw_codec

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    spread = [3, 20, 255][seed % 3]
    w = rng.integers(-spread, spread + 1, size=n).astype(np.int16)
    w[rng.random(n) < [0.0, 0.5, 0.9][seed % 3]] = 0
    stream = bytes(mlw_codec.encode(w.tolist()))
    np.testing.assert_array_equal(rt.mlw_decode(stream), w)
    np.testing.assert_array_equal(
        rt.mlw_decode(stream), np.asarray(mlw_codec.decode(bytearray(stream)), np.int16)
    )


def test_mlw_decoder_rejects_truncated_stream():
    from ethosu import mlw_codec

    w = np.arange(-200, 200, dtype=np.int16)
    stream = bytes(mlw_codec.encode(w.tolist()))
    with pytest.raises(ValueError, match="truncated"):
        rt.mlw_decode(stream[: len(stream) // 2])


# ------------------------------------------------------------------ corruption
def _flip(buf: bytes, off: int) -> bytes:
    b = bytearray(buf)
    b[off] ^= 0xFF
    return bytes(b)


def _changed_or_error(blob, inputs, base_out, **kw) -> str:
    try:
        out = _run_delegate(blob, inputs, **kw)
    except rt.NpuModelError as e:
        assert "command" in str(e)
        return "error"
    return "changed" if out != base_out else "same"


@pytest.mark.parametrize("kind", ["weights", "scales"])
def test_corrupting_one_weight_or_scale_byte_is_seen(kind):
    _, blobs, _ = _compiled("conv_wide", "ethos-u55-128")
    blob = blobs[0]
    inputs = _random_inputs(blob, 0)
    base = _run_delegate(blob, inputs)
    found = [(o, n) for k, o, n in streams(blob.command_stream, len(blob.weights)) if k == kind]
    assert found
    outcomes = []
    for off, n in found[:4]:
        # A byte in the middle of the stream: a weight's bits / a channel's scale.
        target = off + (n // 2 if kind == "weights" else 6)
        outcomes.append(_changed_or_error(blob, inputs, base, weights=_flip(blob.weights, target)))
    assert "same" not in outcomes, outcomes


def test_corrupting_one_command_word_is_seen():
    _, blobs, _ = _compiled("conv_relu", "ethos-u55-128")
    blob = blobs[0]
    inputs = _random_inputs(blob, 1)
    base = _run_delegate(blob, inputs)
    start, words = cmd_stream(blob.command_stream)
    OFM_SCALE, OFM_ZERO_POINT, KERNEL_STRIDE = 0x024, 0x118, 0x122
    checked = 0
    for _, at, op, is1, _, _ in commands(words):
        if (is1, op) in ((False, OFM_ZERO_POINT), (False, KERNEL_STRIDE)) or (
            is1 and op == WEIGHT_BASE
        ):
            payload = bytearray(blob.command_stream)
            w = start + at + (1 if is1 else 0)
            word = struct.unpack_from("<I", payload, 4 * w)[0]
            struct.pack_into("<I", payload, 4 * w, word ^ (0x10 << (0 if is1 else 16)))
            assert _changed_or_error(blob, inputs, base, payload=bytes(payload)) != "same", (
                f"flipping a bit of command word {at} (opcode {op:#x}) went unnoticed"
            )
            checked += 1
    del OFM_SCALE
    assert checked >= 3


# ------------------------------------------------------------------ malformed payloads
def _model_error(payload: bytes, weights=b"\0" * 64, scratch_size=256) -> str:
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(payload, weights, bytearray(scratch_size))
    return str(info.value)


def test_unknown_opcode_names_command_index_and_opcode():
    msg = _model_error(build_payload([cmd0(0x100, 1), cmd0(0x101, 0), cmd0(0x07F, 3)]))
    assert "command 2" in msg and "0x07f" in msg and "unknown" in msg


def test_truncated_stream_is_an_error():
    words = [cmd0(0x100, 0), *cmd1(0x000, 0x40)]
    msg = _model_error(build_payload(words[:-1]))
    assert "command 1" in msg and "NPU_SET_IFM_BASE0" in msg and "payload word" in msg
    msg = _model_error(build_payload(words, length=len(words) + 5))
    assert "only 3 follow" in msg


def test_dma_outside_region_names_command_and_values():
    cmds = [
        cmd0(DMA_SRC_REGION, 0),
        *cmd1(DMA_SRC, 48),
        cmd0(DMA_DST_REGION, 1),
        *cmd1(DMA_DST, 0),
        *cmd1(DMA_LEN, 32),
        cmd0(OP_DMA_START),
        cmd0(0x000, 0xFFFF),
    ]
    msg = _model_error(build_payload(cmds), weights=b"\1" * 64)
    assert "command 5" in msg and "NPU_OP_DMA_START" in msg
    assert "0x30 (+32 bytes) outside region 0 of 64 bytes" in msg


def test_dma_into_weights_region_is_refused():
    cmds = [
        cmd0(DMA_SRC_REGION, 1),
        *cmd1(DMA_SRC, 0),
        cmd0(DMA_DST_REGION, 0),
        *cmd1(DMA_DST, 0),
        *cmd1(DMA_LEN, 16),
        cmd0(OP_DMA_START),
    ]
    assert "read-only" in _model_error(build_payload(cmds))


def test_ofm_outside_scratch_is_an_error_not_a_write():
    """A real delegate's stream with its scratch one byte short: refused before any overrun."""
    _, blobs, _ = _compiled("conv_relu", "ethos-u55-128")
    blob = blobs[0]
    scratch = bytearray(blob.scratch_size - 16)
    with pytest.raises(rt.NpuModelError, match=r"command \d+ .*outside region 1"):
        rt.npu_model_run(blob.command_stream, blob.weights, scratch)


def test_every_truncation_and_word_flip_of_a_real_stream_is_clean():
    """Each prefix of a real command stream, and each of its words with bits flipped, either
    runs or is an NpuModelError naming a command or the payload: never a crash."""
    _, blobs, _ = _compiled("mobilenetv2_block", "ethos-u55-128")
    blob = blobs[0]
    start, words = cmd_stream(blob.command_stream)
    head = list(struct.unpack(f"<{start}I", blob.command_stream[: 4 * start]))
    outcomes = {"ok": 0, "error": 0}

    def run(cmds):
        tag = head[-1] & 0xFF | ((len(cmds) >> 16) & 0xFF) << 8 | (len(cmds) & 0xFFFF) << 16
        payload = struct.pack(f"<{start + len(cmds)}I", *head[:-1], tag, *cmds)
        try:
            rt.npu_model_run(payload, blob.weights, bytearray(blob.scratch_size))
            outcomes["ok"] += 1
        except rt.NpuModelError as e:
            assert "command" in str(e) or "payload" in str(e), str(e)
            outcomes["error"] += 1

    for n in range(0, len(words), 3):
        run(words[:n])
    for i in range(0, len(words), 2):
        for mask in (0x00010000, 0x3FF, 0xFFFFFFFF):
            run(words[:i] + [words[i] ^ mask] + words[i + 1 :])
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes


def test_valid_dma_copies_bytes():
    cmds = [
        cmd0(DMA_SRC_REGION, 0),
        *cmd1(DMA_SRC, 16),
        cmd0(DMA_DST_REGION, 1),
        *cmd1(DMA_DST, 32),
        *cmd1(DMA_LEN, 16),
        cmd0(OP_DMA_START),
        cmd0(0x000, 0xFFFF),
    ]
    weights = bytes(range(64))
    scratch = bytearray(64)
    rt.npu_model_run(build_payload(cmds), weights, scratch)
    assert bytes(scratch[32:48]) == weights[16:32] and scratch[:32] == bytearray(32)


# ------------------------------------------------------------------ CLI
def test_cli_verify_npu_both_and_model_without_tosa(tmp_path, capsys):
    """``ethosu-ng verify --npu both`` reports model-vs-TOSA per output (0 LSB here);
    ``--npu model`` verifies a firmware .pte (no TOSA inside) on the host."""
    import os

    from ethosu_ng.tools.cli import main

    factory = os.path.join(os.path.dirname(__file__), "data", "tiny_factory.py")
    with_tosa, without = str(tmp_path / "t.pte"), str(tmp_path / "f.pte")
    for out, extra in ((with_tosa, ["--embed-tosa"]), (without, [])):
        argv = ["compile", f"{factory}:make", "-o", out, "--calibration", "2", *extra]
        assert main(argv) == 0
    capsys.readouterr()
    assert main(["verify", with_tosa, "-n", "2", "--npu", "both"]) == 0
    out = capsys.readouterr().out
    assert "(--npu both)" in out
    assert "output 0: max |NPU model - TOSA reference| = 0.00 LSB" in out
    assert main(["verify", without, "-n", "2", "--npu", "model"]) == 0
    out = capsys.readouterr().out
    assert "(--npu model)" in out and "output 0: max |pte - eager quantized|" in out


# ------------------------------------------------------------------ integer IO
@pytest.mark.parametrize(
    "in_dtype, out_dtype, channels_last",
    [
        (torch.uint8, torch.int8, False),
        (torch.uint8, torch.uint8, True),
        (torch.int8, torch.int8, True),
    ],
    ids=["u8_in_i8_out", "u8_io_channels_last", "i8_io_channels_last"],
)
def test_integer_program_io_bit_exact(in_dtype, out_dtype, channels_last):
    """uint8 / int8 program IO and channels-last delegates: the NPU reads and writes the
    unsigned / NHWC tensors itself (unsigned IFM precision, uint8 OFM clamp)."""
    from ethosu_ng import io_quantization

    torch.manual_seed(0)
    model, (x,) = ALL["conv_relu"]()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    g = torch.Generator().manual_seed(5)
    floats = [torch.randn(x.shape, generator=g).to(memory_format=fmt) * 2 for _ in range(6)]
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    q = quantize(
        model.eval(),
        (floats[0],),
        spec,
        calibration=[(f,) for f in floats[:4]],
        input_dtype=in_dtype,
        output_dtype=out_dtype,
    )
    edge, _ = lower(q, (floats[0],), spec)
    ioq = io_quantization(edge)
    method = CrossCheckedMethod(edge.to_executorch().buffer, spec.target)
    for xf in floats[3:]:
        feed = [ioq.inputs[0].quantize(xf)]
        assert feed[0].dtype == in_dtype
        assert method.execute(feed)[0].dtype == out_dtype


# ------------------------------------------------------------------ random graphs
N_RANDOM = int(os.environ.get("ETHOSU_NG_NPU_MODEL_EXAMPLES", "8"))


def _random_graph_case(kinds, target, seed):
    torch.manual_seed(seed)
    model = RandomNet(kinds).eval()
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(1, 3, H, W, generator=g) * 2,) for _ in range(4)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(model, data[0], spec, calibration=data)
    edge, _ = lower(q, data[0], spec)
    method = CrossCheckedMethod(edge.to_executorch().buffer, target)
    for batch in data[:2]:
        method.execute(batch, f"{kinds} {target} seed {seed}")


@settings(
    max_examples=N_RANDOM,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(
    st.lists(st.sampled_from(RANDOM_KINDS), min_size=1, max_size=4),
    st.sampled_from(TARGETS),
    st.integers(0, 2**16),
)
def test_random_graphs_npu_model_bit_exact_to_tosa(kinds, target, seed):
    """The random graphs of test_random_graphs_keep_the_contract.py (no ops pinned to the CPU)."""
    _random_graph_case(kinds, target, seed)


# ------------------------------------------------------------------ register field ranges
# NPU_SET_IFM_PAD_TOP, _LEFT, _RIGHT, _BOTTOM (ethos_u55_regs.cmd0), the largest value each holds.
_PAD_FIELDS = {0x100: ("top", 127), 0x101: ("left", 127), 0x102: ("right", 255),
               0x103: ("bottom", 255)}  # fmt: skip


@settings(max_examples=300, deadline=None, derandomize=True)
@given(pads=st.tuples(*[st.integers(0, 300) | st.integers(0, 0xFFFF)] * 4))
def test_ifm_padding_over_the_full_field_range(pads):
    """IFM_PAD_TOP/LEFT are 7-bit fields and IFM_PAD_BOTTOM/RIGHT 8-bit (ethosu55_interface.h):
    a real conv stream with its padding registers rewritten runs, or fails for a reason other
    than the padding fields, exactly when every value fits its field; else the error names the
    field widths."""
    _, blobs, _ = _compiled("conv_relu", "ethos-u55-128")
    blob = blobs[0]
    start, words = cmd_stream(blob.command_stream)
    payload = bytearray(blob.command_stream)
    chosen = dict(zip(sorted(_PAD_FIELDS), pads))
    seen = set()
    for _, at, op, is1, _, _ in commands(words):
        if not is1 and op in _PAD_FIELDS:
            w = struct.unpack_from("<I", payload, 4 * (start + at))[0]
            struct.pack_into("<I", payload, 4 * (start + at), (w & 0xFFFF) | chosen[op] << 16)
            seen.add(op)
    assert seen == set(_PAD_FIELDS)
    fits = all(chosen[op] <= _PAD_FIELDS[op][1] for op in _PAD_FIELDS)
    try:
        rt.npu_model_run(bytes(payload), blob.weights, bytearray(blob.scratch_size * 4))
        msg = ""
    except rt.NpuModelError as e:
        msg = str(e)
    assert ("IFM padding (" in msg) == (not fits), (chosen, msg)
    assert fits or (
        "IFM_PAD_TOP and IFM_PAD_LEFT are 7-bit fields (0..127), IFM_PAD_BOTTOM and IFM_PAD_RIGHT "
        "8-bit (0..255)" in msg
    )


@pytest.mark.parametrize(
    ("value", "code", "needle"), [(2, 0x10, "FP_S5_10"), (3, 0x23, "reserved")]
)
def test_acc_format_is_read_not_ignored(value, code, needle):
    """ACC_FORMAT 0/1 (integer accumulators) run; FP_S5_10 is NotSupported and 3 reserved, each
    naming the register, instead of running with an accumulator the stream did not ask for."""
    ACC_FORMAT = 0x124  # NPU_SET_ACC_FORMAT
    _, blobs, _ = _compiled("conv_relu", "ethos-u55-128")
    blob = blobs[0]
    start, words = cmd_stream(blob.command_stream)
    payload = bytearray(blob.command_stream)
    seen = 0
    for _, at, op, is1, _, _ in commands(words):
        if not is1 and op == ACC_FORMAT:
            w = struct.unpack_from("<I", payload, 4 * (start + at))[0]
            struct.pack_into("<I", payload, 4 * (start + at), (w & 0xFFFF) | value << 16)
            seen += 1
    assert seen
    with pytest.raises(rt.NpuModelError, match=rf"ACC_FORMAT.*{needle}") as e:
        rt.npu_model_run(bytes(payload), blob.weights, bytearray(blob.scratch_size))
    assert e.value.code == code
