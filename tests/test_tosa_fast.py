# SPDX-License-Identifier: BSD-3-Clause
"""``numerics.tosa_fast`` against tosa-tools' reference model: every op it evaluates, over drawn
shapes, dtypes, zero points, scales, strides, paddings and dilations, on drawn inputs. Where the
reference model runs the graph, the outputs are equal bit for bit and in dtype; where it calls
the run unpredictable (a REQUIRE fails), the evaluator raises ``OutsideSpec`` so that the
verified compile asks the reference model instead."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tosa_reference_model as refmodel
import tosa_serializer as ts
from _tosa_builder import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng.numerics import tosa_fast

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
_NP = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT48": np.int64}
_RANGE = {"INT8": (-128, 127), "INT16": (-32768, 32767), "INT32": (-(2**31), 2**31 - 1)}


class G(Builder):
    """Every op's result is a graph output (an INT48 one read through a RESCALE to int32: the
    reference model cannot return INT48), unless ``keep``."""

    int48_shift = 2

    def op(self, op, inputs, shape, dtype, keep=False, **attr):
        out = super().op(op, inputs, shape, dtype, **attr)
        if keep:
            return out
        if dtype == "INT48":  # scale32 off, as for an int16 convolution's result
            params = [self.const([1], "INT16"), self.const([self.int48_shift], "INT8")]
            zps = [self.const([0], "INT48"), self.const([0], "INT32")]
            self.op(
                "RESCALE", [out, *params, *zps], shape, "INT32", scale32=False,
                rounding_mode=ts.RoundingMode.SINGLE_ROUND, per_channel=False,
                input_unsigned=False, output_unsigned=False,
            )  # fmt: skip
        else:
            self.output(out)
        return out

    def shape_const(self, values):
        return self._const_shape(values)


def _draw_input(rng, shape, dtype, lo=None, hi=None):
    a, b = _RANGE[dtype]
    lo, hi = a if lo is None else lo, b if hi is None else hi
    return rng.integers(lo, hi + 1, size=shape, dtype=np.int64).astype(_NP[dtype])


def check(tosa: bytes, arrays):
    """The evaluator agrees with the reference model; returns the reference's status name."""
    ok, why = tosa_fast.covers(tosa)
    assert ok, why
    got_ref, status = refmodel.run(tosa, list(arrays), initialize_variable_tensor_from_numpy=True)
    if status == refmodel.GraphStatus.TOSA_VALID:
        got = tosa_fast.run(tosa, arrays)
        assert len(got) == len(got_ref)
        for k, (a, b) in enumerate(zip(got, got_ref)):
            b = np.asarray(b)
            assert a.dtype == b.dtype, (k, a.dtype, b.dtype)
            assert a.shape == b.shape, (k, a.shape, b.shape)
            if not np.array_equal(a, b):
                diff = np.argwhere(a != b)[0]
                raise AssertionError(
                    f"output {k} at {tuple(diff)}: {a[tuple(diff)]} vs {b[tuple(diff)]}"
                )
    elif status == refmodel.GraphStatus.TOSA_UNPREDICTABLE:
        with pytest.raises(tosa_fast.OutsideSpec):
            tosa_fast.run(tosa, arrays)
    else:
        with pytest.raises((tosa_fast.OutsideSpec, tosa_fast.NotCovered, ValueError)):
            tosa_fast.run(tosa, arrays)
    return status.name


def _out(size, k, stride, dilation, lo, hi):
    span = size - 1 + lo + hi - (k - 1) * dilation
    return span // stride + 1 if span >= 0 and span % stride == 0 else None


@st.composite
def window(draw, max_k=4, dilate=True, pad_below_kernel=False):
    """(n, h, w, c, kh, kw, stride, dilation, pad) with an exact output size."""
    n, h, w, c = (
        draw(st.integers(1, 2)),
        draw(st.integers(1, 9)),
        draw(st.integers(1, 9)),
        draw(st.integers(1, 6)),
    )
    kh, kw = draw(st.integers(1, max_k)), draw(st.integers(1, max_k))
    stride = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    dilation = [draw(st.integers(1, 2)), draw(st.integers(1, 2))] if dilate else [1, 1]
    cap_y, cap_x = (kh - 1, kw - 1) if pad_below_kernel else (3, 3)
    top, left = draw(st.integers(0, cap_y)), draw(st.integers(0, cap_x))
    # the bottom/right padding that makes the output size exact, when there is one
    bottom = next(
        (b for b in range(cap_y + 1) if _out(h, kh, stride[0], dilation[0], top, b)), None
    )
    right = next(
        (r for r in range(cap_x + 1) if _out(w, kw, stride[1], dilation[1], left, r)), None
    )
    if bottom is None or right is None:
        bottom = right = 0
        stride, top, left = [1, 1], 0, 0
        h, w = max(h, (kh - 1) * dilation[0] + 1), max(w, (kw - 1) * dilation[1] + 1)
    pad = [top, bottom, left, right]
    oh = _out(h, kh, stride[0], dilation[0], top, bottom)
    ow = _out(w, kw, stride[1], dilation[1], left, right)
    return n, h, w, c, kh, kw, stride, dilation, pad, oh, ow


@given(
    window(),
    st.integers(1, 6),
    st.sampled_from(["INT8", "INT16"]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.sampled_from([1, 1, 17]),
)
@settings(max_examples=120, **SETTINGS)
def test_conv2d(win, oc, dtype, seed, zero_points, widen):
    """``widen``: 17 times the channels, so that an int8 output sums more products than one
    float32 product may (``tosa_fast._product_type``: 258 of the largest magnitudes)."""
    rng = np.random.default_rng(seed)
    n, h, w, c, kh, kw, stride, dilation, pad, oh, ow = win
    c *= widen
    acc, out_t = ("INT32", "INT32") if dtype == "INT8" else ("INT48", "INT48")
    izp = int(rng.integers(-128, 128)) if zero_points and dtype == "INT8" else 0
    wzp = int(rng.integers(-128, 128)) if zero_points and dtype == "INT8" else 0
    b = G()
    x = b.input([n, h, w, c], dtype)
    wt = b.const(_draw_input(rng, [oc, kh, kw, c], "INT8"), "INT8")
    bias = b.const(rng.integers(-(2**20), 2**20, size=[oc if seed % 2 else 1]), acc)
    b.op(
        "CONV2D",
        [x, wt, bias, b.const([izp], dtype), b.const([wzp], "INT8")],
        [n, oh, ow, oc],
        out_t,
        pad=pad,
        stride=stride,
        dilation=dilation,
        local_bound=False,
        acc_type=ts.DType.__members__["INT32" if dtype == "INT8" else "INT48"],
    )
    check(b.tosa(), [_draw_input(rng, [n, h, w, c], dtype)])


@pytest.mark.parametrize("op", ["CONV2D", "DEPTHWISE_CONV2D", "MATMUL"])
@pytest.mark.parametrize("terms", [258, 259, 577])
def test_sums_past_what_one_float32_product_holds(op, terms):
    """Every product at the largest magnitude, one sign: ``terms`` of 255 * 255 pass 2**24
    from 259 on, where a float32 sum rounds; the evaluator chunks the reduction (a depthwise
    kernel of ``terms`` taps sums its float32 products in float64) and agrees with the
    reference model."""
    b = G()
    lo = _RANGE["INT8"][0]
    zp = b.const([_RANGE["INT8"][1]], "INT8")  # -128 - 127 = -255 on both sides
    if op == "CONV2D":
        x = b.input([1, 2, 2, terms], "INT8")
        wt = b.const(np.full([3, 1, 1, terms], lo), "INT8")
        bias = b.const([0], "INT32")
        b.op(
            "CONV2D",
            [x, wt, bias, zp, zp],
            [1, 2, 2, 3],
            "INT32",
            pad=[0, 0, 0, 0],
            stride=[1, 1],
            dilation=[1, 1],
            local_bound=False,
            acc_type=ts.DType.__members__["INT32"],
        )
        inputs = [np.full([1, 2, 2, terms], lo, dtype=np.int8)]
    elif op == "DEPTHWISE_CONV2D":  # a 1 x terms kernel over a 1 x terms map: one output
        x = b.input([1, 1, terms, 2], "INT8")
        wt = b.const(np.full([1, terms, 2, 1], lo), "INT8")
        bias = b.const([0, 0], "INT32")
        b.op(
            "DEPTHWISE_CONV2D",
            [x, wt, bias, zp, zp],
            [1, 1, 1, 2],
            "INT32",
            pad=[0, 0, 0, 0],
            stride=[1, 1],
            dilation=[1, 1],
            local_bound=False,
            acc_type=ts.DType.__members__["INT32"],
        )
        inputs = [np.full([1, 1, terms, 2], lo, dtype=np.int8)]
    else:
        x, y = b.input([1, 2, terms], "INT8"), b.input([1, terms, 3], "INT8")
        b.op("MATMUL", [x, y, zp, zp], [1, 2, 3], "INT32")
        inputs = [np.full([1, 2, terms], lo, np.int8), np.full([1, terms, 3], lo, np.int8)]
    assert check(b.tosa(), inputs) == "TOSA_VALID"
    (got,) = tosa_fast.run(b.tosa(), inputs)
    assert int(got.reshape(-1)[0]) == terms * 255 * 255


@given(window(), st.integers(1, 3), st.sampled_from(["INT8", "INT16"]), st.integers(0, 2**31 - 1))
@settings(max_examples=80, **SETTINGS)
def test_depthwise_conv2d(win, m, dtype, seed):
    rng = np.random.default_rng(seed)
    n, h, w, c, kh, kw, stride, dilation, pad, oh, ow = win
    acc = "INT32" if dtype == "INT8" else "INT48"
    izp = int(rng.integers(-128, 128)) if dtype == "INT8" else 0
    b = G()
    x = b.input([n, h, w, c], dtype)
    wt = b.const(_draw_input(rng, [kh, kw, c, m], "INT8"), "INT8")
    bias = b.const(rng.integers(-(2**20), 2**20, size=[c * m]), acc)
    b.op(
        "DEPTHWISE_CONV2D",
        [x, wt, bias, b.const([izp], dtype), b.const([3], "INT8")],
        [n, oh, ow, c * m],
        acc,
        pad=pad,
        stride=stride,
        dilation=dilation,
        local_bound=False,
        acc_type=ts.DType.__members__[acc],
    )
    check(b.tosa(), [_draw_input(rng, [n, h, w, c], dtype)])


@given(
    st.integers(1, 3),
    st.integers(1, 12),
    st.integers(1, 40) | st.integers(200, 700),
    st.integers(1, 12),
    st.sampled_from(["INT8", "INT16"]),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, **SETTINGS)
def test_matmul(n, h, c, w, dtype, seed):
    rng = np.random.default_rng(seed)
    out_t = "INT32" if dtype == "INT8" else "INT48"
    zps = [int(v) for v in rng.integers(-128, 128, 2)] if dtype == "INT8" else [0, 0]
    b = G()
    b.int48_shift = 12  # 40 products of two int16 values exceed int32
    x, y = b.input([n, h, c], dtype), b.input([n, c, w], dtype)
    b.op("MATMUL", [x, y, b.const([zps[0]], dtype), b.const([zps[1]], dtype)], [n, h, w], out_t)
    check(b.tosa(), [_draw_input(rng, [n, h, c], dtype), _draw_input(rng, [n, c, w], dtype)])


@given(
    window(max_k=4, dilate=False, pad_below_kernel=True),
    st.sampled_from(["INT8", "INT16"]),
    st.sampled_from(["AVG_POOL2D", "MAX_POOL2D"]),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=120, **SETTINGS)
def test_pools(win, dtype, op, seed):
    rng = np.random.default_rng(seed)
    n, h, w, c, kh, kw, stride, _, pad, oh, ow = win
    b = G()
    x = b.input([n, h, w, c], dtype)
    window = dict(kernel=[kh, kw], stride=stride, pad=pad)
    if op == "AVG_POOL2D":
        zps = [int(v) for v in rng.integers(-128, 128, 2)] if dtype == "INT8" else [0, 0]
        inputs = [x, b.const([zps[0]], dtype), b.const([zps[1]], dtype)]
        b.op(op, inputs, [n, oh, ow, c], dtype, **window, acc_type=ts.DType.INT32)
    else:
        nan = ts.NanPropagationMode.PROPAGATE
        b.op(op, [x], [n, oh, ow, c], dtype, **window, nan_mode=nan)
    check(b.tosa(), [_draw_input(rng, [n, h, w, c], dtype)])


@st.composite
def rescale_case(draw):
    in_t = draw(st.sampled_from(["INT8", "INT16", "INT32", "INT48"]))
    out_t = draw(st.sampled_from(["INT8", "INT16", "INT32"]))
    scale32 = in_t != "INT48" and draw(st.booleans())
    # unsigned only between tensors of one width (u8 <-> i8, u16 <-> i16), one side at a time
    same = in_t == out_t and in_t in ("INT8", "INT16")
    in_uns = same and draw(st.integers(0, 3)) == 0
    out_uns = same and not in_uns and draw(st.integers(0, 3)) == 0
    rounding = (
        draw(st.sampled_from(["SINGLE_ROUND", "DOUBLE_ROUND"])) if scale32 else "SINGLE_ROUND"
    )
    shift = draw(st.integers(2, 62) | st.integers(28, 40))
    mult = draw(st.integers(0, 2**31 - 1) if scale32 else st.integers(0, 2**15 - 1))
    per_channel = draw(st.booleans())
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    return in_t, out_t, scale32, in_uns, out_uns, rounding, shift, mult, per_channel, shape


@given(rescale_case(), st.integers(0, 2**31 - 1))
@settings(max_examples=300, **SETTINGS)
def test_rescale(case, seed):
    rng = np.random.default_rng(seed)
    in_t, out_t, scale32, in_uns, out_uns, rounding, shift, mult, per_channel, shape = case
    izp = int(rng.integers(-128, 128)) if in_t == "INT8" or in_uns else 0
    if in_uns and in_t == "INT16":
        izp = 0 if seed % 2 else -32768  # 0 or 32768 read unsigned
    ozp = int(rng.integers(-128, 128)) if out_t == "INT8" or out_uns else 0
    if out_uns and out_t == "INT16":
        ozp = 0 if seed % 3 else -32768
    zp_t = {"INT48": "INT48", "INT32": "INT32"}.get(in_t, in_t)
    b = G()
    lo, hi = _RANGE.get(in_t, _RANGE["INT16"])
    bound = 1 << min(shift - 2, 46)
    narrow = (max(lo, -bound), min(hi, bound)) if seed % 4 else (lo, hi)
    if in_t == "INT48":
        # an INT48 tensor is not a graph input: an int16 1x1 convolution makes one, its bias
        # moving the values up to 2**46
        shape = [1, 1] + shape[-2:] if len(shape) >= 2 else [1, 1, 1] + shape
        x16 = b.input(shape, "INT16")
        big = int(rng.integers(0, 47))
        bias = b.const(rng.integers(-(2**big), 2**big, size=[shape[-1]]), "INT48")
        one = np.eye(shape[-1], dtype=np.int64).reshape(shape[-1], 1, 1, shape[-1])
        x = b.op(
            "CONV2D",
            [x16, b.const(one, "INT8"), bias, b.const([0], "INT16"), b.const([0], "INT8")],
            shape,
            "INT48",
            keep=True,
            pad=[0, 0, 0, 0],
            stride=[1, 1],
            dilation=[1, 1],
            local_bound=False,
            acc_type=ts.DType.INT48,
        )
        arr = rng.integers(narrow[0], narrow[1] + 1, size=shape, dtype=np.int64).astype(np.int16)
    else:
        x = b.input(shape, in_t)
        arr = rng.integers(narrow[0], narrow[1] + 1, size=shape, dtype=np.int64).astype(_NP[in_t])
    ch = shape[-1] if per_channel else 1
    mults = [mult] + [int(v) for v in rng.integers(0, mult + 1, ch - 1)]
    near = rng.integers(max(2, shift - 3), min(62, shift + 3) + 1, ch - 1)
    shifts = [shift] + [int(v) for v in near]
    b.op(
        "RESCALE",
        [
            x,
            b.const(mults, "INT32" if scale32 else "INT16"),
            b.const(shifts, "INT8"),
            b.const([izp], zp_t),
            b.const([ozp], out_t),
        ],
        shape,
        out_t,
        scale32=scale32,
        rounding_mode=ts.RoundingMode.__members__[rounding],
        per_channel=per_channel,
        input_unsigned=in_uns,
        output_unsigned=out_uns,
    )
    check(b.tosa(), [arr])


@given(
    st.sampled_from(["ADD", "SUB", "MAXIMUM", "MINIMUM", "MUL"]),
    st.lists(st.integers(1, 4), min_size=1, max_size=4),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["INT8", "INT16", "INT32"]),
    st.integers(0, 40),
    st.booleans(),
    st.sampled_from([4, 16, 31, 32]),
)
@settings(max_examples=200, **SETTINGS)
def test_elementwise_binary(op, shape, seed, dtype, shift, broadcast, bits):
    rng = np.random.default_rng(seed)
    dtype = dtype if op == "MUL" else "INT32"
    other = [1 if broadcast and rng.integers(2) else d for d in shape]
    b = G()
    x, y = b.input(shape, dtype), b.input(other, dtype)
    extra = [b.const([shift if dtype == "INT32" else 0], "INT8")] if op == "MUL" else []
    nan = {"nan_mode": ts.NanPropagationMode.PROPAGATE} if op in ("MAXIMUM", "MINIMUM") else {}
    b.op(op, [x, y, *extra], shape, "INT32", **nan)
    # small and large values: some sums and products overflow
    lo, hi = _RANGE[dtype]
    lim = (max(lo, -(2 ** (bits - 1))), min(hi, 2 ** (bits - 1) - 1))
    check(b.tosa(), [_draw_input(rng, shape, dtype, *lim), _draw_input(rng, other, dtype, *lim)])


@given(
    st.sampled_from(["INT8", "INT16"]),
    st.integers(0, 2**31 - 1),
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
)
@settings(max_examples=60, **SETTINGS)
def test_clamp_and_table(dtype, seed, shape):
    rng = np.random.default_rng(seed)
    lo, hi = sorted(int(v) for v in _draw_input(rng, [2], dtype))
    b = G()
    x = b.input(shape, dtype)
    nb = np.dtype(_NP[dtype]).newbyteorder("<")
    b.op(
        "CLAMP",
        [x],
        shape,
        dtype,
        min_val=list(np.asarray([lo], nb).tobytes()),
        max_val=list(np.asarray([hi], nb).tobytes()),
        nan_mode=ts.NanPropagationMode.PROPAGATE,
    )
    if dtype == "INT8":
        b.op("TABLE", [x, b.const(_draw_input(rng, [256], "INT8"), "INT8")], shape, "INT8")
    else:
        b.op("TABLE", [x, b.const(_draw_input(rng, [513], "INT16"), "INT16")], shape, "INT32")
    check(b.tosa(), [_draw_input(rng, shape, dtype)])


@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=5),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["INT8", "INT16", "INT32"]),
)
@settings(max_examples=120, **SETTINGS)
def test_data_movement_and_reductions(shape, seed, dtype):
    rng = np.random.default_rng(seed)
    rank = len(shape)
    b = G()
    x = b.input(shape, dtype)
    perm = [int(p) for p in rng.permutation(rank)]
    b.op("TRANSPOSE", [x], [shape[p] for p in perm], dtype, perms=perm)
    flat = int(np.prod(shape))
    b.op("RESHAPE", [x, b.shape_const([flat])], [flat], dtype)
    start = [int(rng.integers(0, d)) for d in shape]
    size = [int(rng.integers(1, d - s + 1)) for d, s in zip(shape, start)]
    b.op("SLICE", [x, b.shape_const(start), b.shape_const(size)], size, dtype)
    pads = [int(v) for v in rng.integers(0, 3, 2 * rank)]
    padded = [d + pads[2 * k] + pads[2 * k + 1] for k, d in enumerate(shape)]
    fill = int(_draw_input(rng, [1], dtype)[0])
    b.op("PAD", [x, b.shape_const(pads), b.const([fill], dtype)], padded, dtype)
    axis = int(rng.integers(0, rank))
    y = b.input(shape, dtype)
    cat = list(shape)
    cat[axis] *= 2
    b.op("CONCAT", [x, y], cat, dtype, axis=axis)
    kept = [1 if k == axis else d for k, d in enumerate(shape)]
    b.op("REDUCE_MAX", [x], kept, dtype, axis=axis, nan_mode=ts.NanPropagationMode.PROPAGATE)
    b.op("REDUCE_MIN", [x], kept, dtype, axis=axis, nan_mode=ts.NanPropagationMode.PROPAGATE)
    if dtype == "INT32":
        b.op("REDUCE_SUM", [x], kept, dtype, axis=axis)
    b.op("IDENTITY", [x], shape, dtype)
    check(b.tosa(), [_draw_input(rng, shape, dtype), _draw_input(rng, shape, dtype)])


def test_a_graph_with_an_op_it_lacks_is_not_covered():
    b = G()
    x = b.input([2, 3], "INT32")
    b.op("ABS", [x], [2, 3], "INT32")
    ok, why = tosa_fast.covers(b.tosa())
    assert not ok and why == "op ABS"
    with pytest.raises(tosa_fast.NotCovered, match="ABS"):
        tosa_fast.run(b.tosa(), [np.zeros((2, 3), np.int32)])


def _partitions_agree(model, example, target):
    """Every delegate of ``model`` compiled for ``target``: the evaluator covers its TOSA graph
    and gives the reference model's outputs on the verified compile's sample pair."""
    import ethosu_ng
    from ethosu_ng.adapters import exir
    from ethosu_ng.blob import DelegateBlob
    from ethosu_ng.compiler.verify_npu import sample_inputs

    r = ethosu_ng.compile(
        model, example, target, embed_tosa=True, verify_npu=False, verify_lowering=False
    )
    blobs = [DelegateBlob.from_bytes(d) for _, d in exir.pte_delegate_payloads(r.pte)]
    assert blobs
    for blob in blobs:
        shapes = [tuple(s.shape[d] for d in s.dim_order) for s in blob.inputs]
        for arrays in sample_inputs([s.dtype for s in blob.inputs], shapes, seed=7):
            assert check(blob.tosa, arrays) == "TOSA_VALID"


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_the_partitions_of_small_cnns_agree(target):
    from models import SmallCNN

    _partitions_agree(SmallCNN(), SmallCNN.example(), target)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize(
    "model",
    [
        "timm:resnet18",
        "timm:mobilenetv2_100",
        "torchvision:mobilenet_v3_small",
        "timm:efficientnet_b0",
    ],
)
def test_the_partitions_of_the_zoo_cnns_agree(model, target):
    _partitions_agree(model, None, target)


@given(
    st.sampled_from(["INT8", "INT16"]),
    st.sampled_from(["INT8", "INT16", "INT32"]),
    st.integers(0, 2**31 - 1) | st.sampled_from([0, 1, 1 << 30, 2**31 - 1]),
    st.integers(-2, 64),
    st.integers(-128, 127),
    st.integers(-128, 127),
)
@settings(max_examples=300, **SETTINGS)
def test_the_rescale_rewrites_compute_a_rescale_as_the_evaluator_does(
    in_t, out_t, multiplier, shift, in_zp, out_zp
):
    """``tosa_optimize``'s ``apply_rescale`` (which decides whether a rewrite is exact) and this
    evaluator's RESCALE are two codings of one formula: over the input type's whole domain they
    agree wherever the first gives an answer, and where the evaluator finds a REQUIRE failing
    the first gives none."""
    from ethosu_ng.tosa_optimize.rewrites._rescale import apply_rescale

    in_zp = in_zp if in_t == "INT8" else 0
    out_zp = out_zp if out_t == "INT8" else 0
    lo, hi = _RANGE[in_t]
    domain = np.arange(lo, hi + 1, dtype=np.int64)
    b = G()
    x = b.input([domain.size], in_t)
    b.op(
        "RESCALE",
        [x, b.const([multiplier], "INT32"), b.const([min(max(shift, -128), 127)], "INT8"),
         b.const([in_zp], in_t), b.const([out_zp], out_t)],
        [domain.size], out_t, scale32=True, rounding_mode=ts.RoundingMode.SINGLE_ROUND,
        per_channel=False, input_unsigned=False, output_unsigned=False,
    )  # fmt: skip
    want = apply_rescale(domain, multiplier, shift, in_zp, out_zp, out_t)
    try:
        (got,) = tosa_fast.run(b.tosa(), [domain.astype(_NP[in_t])])
    except tosa_fast.OutsideSpec:
        assert want is None
        return
    if want is not None:
        assert np.array_equal(got.astype(np.int64), want)


@st.composite
def small_cnns(draw):
    """A convolutional block as vision models write one: a convolution (any kernel, stride,
    padding, dilation; plain, grouped or depthwise), an activation, a pooling (average with or
    without the padding counted, ceil mode or not; max), a residual add, a linear head."""
    import torch
    from torch import nn

    cin, h, w = draw(st.integers(1, 6)), draw(st.integers(5, 14)), draw(st.integers(5, 14))
    k, stride, dil = draw(st.integers(1, 4)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    groups = draw(st.sampled_from(["plain", "depthwise", "grouped"]))
    cout = cin if groups == "depthwise" else draw(st.integers(1, 10))
    g = {"plain": 1, "depthwise": cin, "grouped": 1 if cin % 2 or cout % 2 else 2}[groups]
    pad = draw(st.integers(0, k // 2))
    act = draw(st.sampled_from(["relu", "relu6", "hardswish", "sigmoid", "silu", "none"]))
    pool = draw(st.sampled_from(["avg", "avg_exclude_pad", "max", "none"]))
    pk = draw(st.integers(2, 3))
    ceil = draw(st.booleans())
    residual, head = draw(st.booleans()), draw(st.booleans())
    acts = {"relu": nn.ReLU(), "relu6": nn.ReLU6(), "hardswish": nn.Hardswish(),
            "sigmoid": nn.Sigmoid(), "silu": nn.SiLU(), "none": nn.Identity()}  # fmt: skip
    pools = {
        "avg": nn.AvgPool2d(pk, 1, pk // 2, ceil_mode=ceil),
        "avg_exclude_pad": nn.AvgPool2d(pk, 1, pk // 2, ceil_mode=ceil, count_include_pad=False),
        "max": nn.MaxPool2d(pk, 1, pk // 2, ceil_mode=ceil),
        "none": nn.Identity(),
    }

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, stride, pad, dil, groups=g)
            self.act, self.pool = acts[act], pools[pool]
            self.fc = nn.Linear(cout, 5)

        def forward(self, x):
            y = self.act(self.conv(x))
            z = self.pool(y)
            if residual and z.shape == y.shape:
                z = z + y
            return self.fc(z.mean((2, 3))) if head else z

    torch.manual_seed(draw(st.integers(0, 2**16)))
    model = Block().eval()
    if (h + 2 * pad - dil * (k - 1) - 1) // stride + 1 < 1 or (
        w + 2 * pad - dil * (k - 1) - 1
    ) // stride + 1 < 1:
        model.conv.padding = (k * dil, k * dil)
    return model, (torch.randn(1, cin, h, w),)


@given(small_cnns(), st.sampled_from(["ethos-u55-128", "ethos-u85-256"]))
@settings(max_examples=int(os.environ.get("ETHOSU_NG_TOSA_FAST_CNNS", "6")), **SETTINGS)
def test_drawn_convolutional_blocks_are_covered_and_agree(case, target):
    """The class the evaluator is for, drawn: every delegate of a lowered convolutional block is
    covered, and its outputs equal the reference model's on the verified compile's pair."""
    model, example = case
    _partitions_agree(model, example, target)
