# SPDX-License-Identifier: BSD-3-Clause
"""WidenFromNarrowSibling: an a16w8 convolution's int32 residual operand, which upstream rescales
from the INT48 accumulator beside the int16 result, is read from the int16 result shifted left.
Over shapes, scales, shifts and the readers around it, the rewritten graph computes the
quantized model's arithmetic (the convolution output rounded and clamped to int16 once, then
added) exactly; where the two RESCALEs are not the same scale ``2**k`` apart, or a third reader
shares the accumulator, nothing changes. Vela then folds the requantization into the
convolution (on Ethos-U55/U65 Vela cannot run the convolution at all before); the stream runs
bit-exact to TOSA on the NPU model."""

import numpy as np
import pytest
from _tosa_builder import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.tosa_graph import tosa_io
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.pipeline import optimize
from ethosu_ng.tosa_optimize.rewrites._rescale import apply_rescale
from ethosu_ng.tosa_optimize.verify import random_inputs, run_reference

FAST = settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
VARIANTS = ("same", "other_multiplier", "finer_narrow", "third_reader", "wide_zero_point")


def _rescale48(b: Builder, x, out_dtype, mults, shifts, out_zp=0):
    """A per-channel RESCALE of an INT48 accumulator (16-bit multipliers, as TOSA requires)."""
    import tosa_serializer as ts

    inputs = [
        x,
        b.const(list(mults), "INT16"),
        b.const(list(shifts), "INT8"),
        b.const([0], "INT48"),
        b.const([out_zp], out_dtype),
    ]
    attr = {
        "scale32": False,
        "rounding_mode": ts.RoundingMode.SINGLE_ROUND,
        "per_channel": True,
        "input_unsigned": False,
        "output_unsigned": False,
    }
    return b._op("RESCALE", inputs, b.shape(x), out_dtype, attr)


def conv_residual(h, w, cin, cout, mults, shifts, k, out_shift, variant, seed, wide_first=False):
    """``x -> conv (INT48) -> int16`` (a graph output, the next block's input) and the residual
    ``ADD(conv << k, RESCALE(r) << k)`` requantized to int16, as upstream lowers a16w8."""
    import tosa_serializer as ts

    rng = np.random.default_rng(seed)
    b = Builder()
    x = b.input([1, h, w, cin], "INT16")
    weights = b.const(rng.integers(-128, 128, [cout, 1, 1, cin]), "INT8")
    bias = b.const(rng.integers(-(1 << 20), 1 << 20, [cout]), "INT48")
    acc = b.op(
        "CONV2D",
        [x, weights, bias, b.const([0], "INT16"), b.const([0], "INT8")],
        [1, h, w, cout],
        "INT48",
        pad=[0, 0, 0, 0],
        stride=[1, 1],
        dilation=[1, 1],
        local_bound=False,
        acc_type=ts.DType.INT48,
    )
    wide_mults = [m ^ 1 if variant == "other_multiplier" else m for m in mults]
    wide_shifts = [s - (-1 if variant == "finer_narrow" else k) for s in shifts]
    wide_zp = 3 if variant == "wide_zero_point" else 0
    if wide_first:  # the rewritten int32 RESCALE then reads a tensor produced after it
        wide = _rescale48(b, acc, "INT32", wide_mults, wide_shifts, out_zp=wide_zp)
    narrow = _rescale48(b, acc, "INT16", mults, shifts)
    if not wide_first:
        wide = _rescale48(b, acc, "INT32", wide_mults, wide_shifts, out_zp=wide_zp)
    r = b.rescale(b.input([1, h, w, cout], "INT16"), "INT32", 1 << 30, 30 - k)
    b.output(narrow)
    b.output(b.rescale(b.binary("ADD", wide, r), "INT16", 1 << 30, out_shift))
    if variant == "third_reader":
        b.output(_rescale48(b, acc, "INT8", mults, [s + 8 for s in shifts]))
    return b.tosa()


@st.composite
def cases(draw):
    cout = draw(st.integers(1, 6))
    k = draw(st.integers(0, 13))
    # shifts keep the int32 operand inside int32: |acc| < 2**28, multiplier < 2**15
    shifts = [draw(st.integers(k + 13, k + 30)) for _ in range(cout)]
    mults = [draw(st.integers(1, (1 << 15) - 1)) for _ in range(cout)]
    return dict(
        h=draw(st.integers(1, 4)),
        w=draw(st.integers(1, 4)),
        cin=draw(st.integers(1, 8)),
        cout=cout,
        mults=mults,
        shifts=shifts,
        k=k,
        out_shift=30 + k,
        variant=draw(st.one_of(st.just("same"), st.sampled_from(VARIANTS))),
        seed=draw(st.integers(0, 3)),
        wide_first=draw(st.booleans()),
    )


def _readers(tosa: bytes, op: str) -> int:
    g = tosa_ir.read(tosa)
    (acc,) = [o.outputs[0] for o in g.ops if o.op == op]
    return sum(t == acc for o in g.ops for t in o.inputs)


def _quantized_model(narrow: np.ndarray, residual: np.ndarray, k: int, out_shift: int):
    """The residual sum as the quantized model computes it: the convolution's int16 result and
    the residual, both ``<< k``, added, requantized to int16 (TOSA's rounding)."""
    total = (narrow.astype(np.int64) << k) + (residual.astype(np.int64) << k)
    return apply_rescale(total, 1 << 30, out_shift, 0, 0, "INT16")


@FAST
@given(cases())
def test_the_int32_operand_is_the_int16_result_shifted_where_the_scales_match(case):
    tosa = conv_residual(**case)
    result = optimize(tosa)
    applied = result.applied.get("WidenFromNarrowSibling", 0)
    if case["variant"] != "same":
        assert applied == 0 and _readers(result.tosa, "CONV2D") == _readers(tosa, "CONV2D")
        return
    assert applied == 1
    assert _readers(tosa, "CONV2D") == 2 and _readers(result.tosa, "CONV2D") == 1
    ins, _ = tosa_io(tosa)
    rng = np.random.default_rng(case["seed"])
    extremes = [np.full(i.shape, v, np.int16) for i, v in zip(ins, (32767, -32768))]
    for arrays in (random_inputs(ins, rng), extremes):
        narrow, _ = run_reference(tosa, arrays)
        narrow_after, after = run_reference(result.tosa, arrays)
        assert np.array_equal(narrow, narrow_after)
        want = _quantized_model(narrow, arrays[1], case["k"], case["out_shift"])
        assert np.array_equal(after, want), np.abs(after.astype(int) - want).max()


def _vela(tosa: bytes, target: str):
    from ethosu_ng.tosa_graph import tosa_ops
    from ethosu_ng.vela.compiler import compile_tosa

    r = compile_tosa(tosa, EthosUNGCompileSpec(target), "t")
    ops = tosa_ops(tosa)
    rescales = sum(1 for layer in r.layers if ops[layer.tosa_index].op == "RESCALE")
    return rescales, int(float(r.summary["cycles_npu"])), r


MOBILENET_BLOCK = dict(  # mobilenet_v3_small's first residual: 28 x 28 x 24 from 72, k = 11
    h=28, w=28, cin=72, cout=24, mults=[19023, 29287] * 12, shifts=[21, 22] * 12, k=11,
    out_shift=41, variant="same", seed=0,
)  # fmt: skip


@pytest.mark.parametrize("target", ["ethos-u85-256", "ethos-u55-128"])
def test_the_requantization_folds_into_the_convolution(target):
    from ethosu_ng.vela.compiler import VelaError

    tosa = conv_residual(**MOBILENET_BLOCK)
    after = _vela(optimize(tosa).tosa, target)
    # the int16 result's shift and the residual's fold into the ADD as operand scales
    assert after[0] == 0, after[:2]
    if target == "ethos-u55-128":
        # Vela cannot run the convolution whose INT48 accumulator two RESCALEs read on U55/U65
        with pytest.raises(VelaError, match=r"\(Conv2D\) could not run on NPU"):
            _vela(tosa, target)
        return
    before = _vela(tosa, target)
    assert before[0] == 3 and after[1] < before[1] / 4, (before[:2], after[:2])
    # measured 254,549 -> 23,997 NPU cycles


def test_the_rewritten_block_runs_bit_exact_on_the_npu_model():
    from ethosu_ng import runtime as rt

    tosa = optimize(conv_residual(**dict(MOBILENET_BLOCK, h=6, w=6, wide_first=True))).tosa
    _, _, vela = _vela(tosa, "ethos-u55-128")
    ins, _ = tosa_io(tosa)
    rng = np.random.default_rng(1)
    extremes = [np.full(i.shape, v, np.int16) for i, v in zip(ins, (32767, -32768))]
    for arrays in (random_inputs(ins, rng), extremes):
        want = run_reference(tosa, arrays)
        scratch = bytearray(vela.scratch_size)
        for t, a in zip(vela.inputs, arrays):
            data = np.ascontiguousarray(a).tobytes()
            scratch[t.offset : t.offset + len(data)] = data
        rt.npu_model_run(vela.command_stream, vela.weights, scratch, None)
        for t, w in zip(vela.outputs, want):
            got = np.frombuffer(bytes(scratch[t.offset : t.offset + t.numel * 2]), np.int16)
            assert np.array_equal(got, w.reshape(-1)), np.abs(got - w.reshape(-1)).max()


def test_verify_compares_with_the_graph_this_rewrite_alone_makes(monkeypatch):
    """``optimize(verify=True)`` holds the other rewrites to bit-exactness against the graph the
    inexact rewrite alone makes; declared exact, the same rewrite is named as changing bits."""
    from ethosu_ng.tosa_optimize.rewrites.widen_from_narrow_sibling import WidenFromNarrowSibling
    from ethosu_ng.tosa_optimize.verify import NotBitExact

    tosa = conv_residual(**dict(MOBILENET_BLOCK, h=4, w=4, cin=2))  # int32 stays in range
    assert optimize(tosa, verify=True).applied["WidenFromNarrowSibling"] == 1
    monkeypatch.setattr(WidenFromNarrowSibling, "exact", True)
    with pytest.raises(NotBitExact, match=r"on their own: \['WidenFromNarrowSibling'\]"):
        optimize(tosa, verify=True)
