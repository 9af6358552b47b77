# SPDX-License-Identifier: BSD-3-Clause
"""RepeatChannelsForDepthwise (tosa_optimize/rewrites/repeat_channels_for_depthwise.py): a
depthwise convolution with channel multiplier M > 1 reads a copy of its input with each channel
repeated M times, as a multiplier-1 depthwise convolution. Exact over shapes, multipliers,
kernels, strides, dilations, input types and zero points; made only where Vela estimates it
cheaper (never more cycles, on each target family); one copy per input and multiplier; the
stream Vela makes of it runs bit-exact to TOSA on the U55 and U85 NPU models."""

import numpy as np
import pytest
import tosa_serializer as ts
from _tosa_builder import Builder
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.tosa_graph import tosa_io
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.pipeline import optimize
from ethosu_ng.tosa_optimize.rewrites import repeat_channels_for_depthwise as rcd
from ethosu_ng.tosa_optimize.verify import check_bit_exact, random_inputs, run_reference
from ethosu_ng.vela.compiler import compile_tosa

RANGE = {"INT8": (-128, 127), "INT16": (-32768, 32767)}
NP = {"INT8": np.int8, "INT16": np.int16}


def _settings(n):
    return settings(
        max_examples=n, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )


def depthwise(b, x, c, m, k, s, d, zp, seed):
    """A DEPTHWISE_CONV2D of ``x`` (multiplier ``m``, ``k`` x ``k``, stride ``s``, dilation
    ``d``, about-same padding) requantized per channel, as upstream lowers ``Conv2d(C, C * M, k,
    groups=C)``."""
    rng = np.random.default_rng(seed)
    dtype = b.dtype(x)
    acc = "INT32" if dtype == "INT8" else "INT48"
    _, h, w, _ = b.shape(x)
    reach = (k - 1) * d
    pads, out_hw = [], []
    for size in (h, w):
        top, bottom = reach // 2, reach - reach // 2
        while (size - 1 + top + bottom - reach) % s:  # TOSA: a whole number of strides
            bottom += 1
        pads += [top, bottom]
        out_hw.append((size - 1 + top + bottom - reach) // s + 1)
    y = b.op(
        "DEPTHWISE_CONV2D",
        [
            x,
            b.const(rng.integers(-127, 128, size=(k, k, c, m)), "INT8"),
            b.const(rng.integers(-4000, 4000, size=(c * m,)), acc),
            b.const([zp], dtype),
            b.const([0], "INT8"),
        ],
        [1, *out_hw, c * m],
        acc,
        acc_type=ts.DType.INT32 if acc == "INT32" else ts.DType.INT48,
        dilation=[d, d],
        local_bound=False,
        pad=pads,
        stride=[s, s],
    )
    n = c * m
    mult = rng.integers(1 << 29, 1 << 30, size=n) if acc == "INT32" else [1 << 14] * n
    shift = [38] * n if acc == "INT32" else [26] * n
    return b.op(
        "RESCALE",
        [
            y,
            b.const(mult, "INT32" if acc == "INT32" else "INT16"),
            b.const(shift, "INT8"),
            b.const([0], acc) if acc == "INT32" else _int48_zero(b),
            b.const([-5 if dtype == "INT8" else 0], dtype),
        ],
        b.shape(y),
        dtype,
        scale32=acc == "INT32",
        rounding_mode=ts.RoundingMode.SINGLE_ROUND,
        per_channel=True,
        input_unsigned=False,
        output_unsigned=False,
    )


def _int48_zero(b):
    return b.const([0], "INT48")


def build(h, w, c, m, k=3, s=1, d=1, dtype="INT8", zp=7, readers=1, seed=0) -> bytes:
    b = Builder()
    x = b.input([1, h, w, c], dtype)
    zp = zp if dtype == "INT8" else 0
    for r in range(readers):
        b.output(depthwise(b, x, c, m, k, s, d, zp, seed + r))
    return b.tosa()


def rewritten_all(tosa: bytes) -> bytes:
    """Every candidate rewritten, whatever Vela would say (the transformation alone)."""
    g = tosa_ir.read(tosa)
    for c in rcd.candidates(g):
        rcd.rewrite(g, c, rcd.repeated_input(g, c))
    g.check_order()
    return tosa_ir.write(g)


def ops(tosa: bytes):
    return [o.op for o in tosa_ir.read(tosa).ops if o.op not in ("CONST", "CONST_SHAPE")]


def extremes(tosa: bytes):
    """Input sets at each end of the input's range, and random ones."""
    ins, _ = tosa_io(tosa)
    drawn = random_inputs(ins, np.random.default_rng(3))
    info = np.iinfo(drawn[0].dtype)
    return [drawn, *([np.full_like(a, end) for a in drawn] for end in (info.min, info.max))]


@_settings(40)
@given(
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    c=st.integers(1, 12),
    m=st.integers(2, 5),
    k=st.sampled_from((1, 2, 3, 5)),
    s=st.integers(1, 2),
    d=st.integers(1, 2),
    dtype=st.sampled_from(("INT8", "INT16")),
    zp=st.integers(-128, 127),
)
@example(h=6, w=5, c=3, m=2, k=3, s=2, d=1, dtype="INT8", zp=-128)
def test_the_rewrite_is_exact(h, w, c, m, k, s, d, dtype, zp):
    tosa = build(h, w, c, m, k, s, d, dtype, zp)
    out = rewritten_all(tosa)
    assert ops(out).count("CONV2D") == 1 and ops(out).count("DEPTHWISE_CONV2D") == 1
    check_bit_exact(tosa, out, inputs=extremes(tosa))


TARGETS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")


def cycles(tosa: bytes, spec) -> float:
    return float(compile_tosa(tosa, spec, "t").summary["cycles_total"])


@_settings(14)
@given(
    hw=st.sampled_from((7, 14, 28, 56)),
    c=st.sampled_from((3, 16, 48, 192, 384)),
    m=st.sampled_from((2, 3, 8)),
    k=st.sampled_from((3, 7)),
    s=st.integers(1, 2),
    target=st.sampled_from(TARGETS),
)
@example(hw=56, c=48, m=2, k=7, s=2, target="ethos-u55-128")  # dearer rewritten on U55
@example(hw=7, c=384, m=2, k=3, s=1, target="ethos-u65-256")  # fewer NPU cycles, longer run
def test_rewritten_only_where_vela_estimates_it_cheaper(hw, c, m, k, s, target):
    tosa = build(hw, hw, c, m, k, s)
    spec = EthosUNGCompileSpec(target)
    result = optimize(tosa, spec=spec)
    before, after = cycles(tosa, spec), cycles(result.tosa, spec)
    if result.applied:
        assert result.applied == {"RepeatChannelsForDepthwise": 1}
        assert after < before
    else:
        assert after == before


def test_fastvits_downsampling_depthwise_loses_its_transposes_on_u85():
    """What the rewrite is for: FastViT's stride-2 7x7 ``Conv2d(48, 96, groups=48)`` on a
    56x56 map. Vela interleaves the multiplier's two passes by Transpose layers (over 80 % of
    930,756 NPU cycles measured); rewritten, no Transpose is left and the NPU cycles drop by
    more than two thirds (199,807 measured)."""
    spec = EthosUNGCompileSpec("ethos-u85-256")
    tosa = build(56, 56, 48, 2, k=7, s=2)
    result = optimize(tosa, spec=spec)
    assert result.applied == {"RepeatChannelsForDepthwise": 1}
    before, after = (compile_tosa(t, spec, "t") for t in (tosa, result.tosa))
    assert any(layer.vela_op == "Transpose" for layer in before.layers)
    assert not any(layer.vela_op == "Transpose" for layer in after.layers)
    npu = [float(v.summary["cycles_npu"]) for v in (before, after)]
    assert npu[1] < npu[0] / 3, npu


def test_depthwise_convolutions_of_one_input_share_one_copy():
    """FastViT's reparameterisable convolution reads one input with a large and a small kernel,
    both with multiplier 2: one repeat, two multiplier-1 convolutions."""
    tosa = build(28, 28, 48, 2, k=7, s=2, readers=2)
    result = optimize(tosa, spec=EthosUNGCompileSpec("ethos-u85-256"))
    assert result.applied == {"RepeatChannelsForDepthwise": 2}
    assert ops(result.tosa).count("CONV2D") == 1
    check_bit_exact(tosa, result.tosa, inputs=extremes(tosa))


def test_a_multiplier_1_depthwise_is_not_a_candidate():
    assert rcd.candidates(tosa_ir.read(build(14, 14, 48, 1))) == []


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize(
    "h, c, m, k, s, dtype",
    [(9, 5, 2, 3, 2, "INT8"), (8, 16, 3, 3, 1, "INT8"), (6, 4, 2, 5, 1, "INT16")],
)
def test_the_rewritten_stream_runs_bit_exact_on_the_npu_model(target, h, c, m, k, s, dtype):
    """Vela's command stream for the rewritten graph (the 1x1 copy, the multiplier-1 depthwise
    convolution) run on the NPU model gives what TOSA gives on the graph before the rewrite,
    on random inputs and at either end of the input's range."""
    from ethosu_ng import runtime as rt

    tosa = build(h, h, c, m, k, s, dtype=dtype, zp=-9)
    vela = compile_tosa(rewritten_all(tosa), EthosUNGCompileSpec(target), "t")
    width = np.dtype(NP[dtype]).itemsize
    for arrays in extremes(tosa):
        (want,) = run_reference(tosa, arrays)
        scratch = bytearray(vela.scratch_size)
        for t, a in zip(vela.inputs, arrays):
            data = np.ascontiguousarray(a).tobytes()
            scratch[t.offset : t.offset + len(data)] = data
        fast = bytearray(vela.fast_scratch_size) if vela.fast_scratch_size else None
        rt.npu_model_run(vela.command_stream, vela.weights, scratch, fast)
        out = vela.outputs[0]
        raw = bytes(scratch[out.offset : out.offset + out.numel * width])
        got = np.frombuffer(raw, NP[dtype])
        assert np.array_equal(got, want.reshape(-1)), (target, h, c, m, k, s, dtype)
