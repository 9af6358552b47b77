# SPDX-License-Identifier: BSD-3-Clause
"""The verified compile's tie bound on an 8-bit partition (``numerics.tie_bound``): where the
TOSA graph rounds a subset of the near ties the other way, which the one flipped run (every tie
the other way) does not bound, an element beyond that run is checked against the bound on what
any subset can do. Sound op by op for the rules an 8-bit transformer needs (lookups, softmax,
padding), used by ``verify_lowering.verify`` only beyond the flipped run, and what lets swin's
attention logits verify (``-m slow``)."""

from __future__ import annotations

import operator
from concurrent.futures import Future

import numpy as np
import pytest
import torch
from executorch.exir.dialects._ops import ops as exir_ops
from hypothesis import given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.compiler import verify_lowering, verify_npu
from ethosu_ng.compiler.verify_lowering import LoweringDeviation
from ethosu_ng.numerics.tie_bound import TieBound
from ethosu_ng.tensor_spec import TensorSpec

_DQ = exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default
_LOOKUPS = {
    "rsqrt": exir_ops.edge.aten.rsqrt.default,
    "exp": exir_ops.edge.aten.exp.default,
    "sigmoid": exir_ops.edge.aten.sigmoid.default,
    "tanh": exir_ops.edge.aten.tanh.default,
    "gelu": exir_ops.edge.aten.gelu.default,
    "floor": exir_ops.edge.aten.floor.default,
}


def _step(target, args, values, deltas, result):
    """``TieBound.step`` on one node ``target(*args)`` of a graph whose placeholders carry
    ``deltas``; returns the node's delta."""
    g = torch.fx.Graph()
    nodes = [g.placeholder(f"x{k}") if isinstance(a, str) else a for k, a in enumerate(args)]
    node = g.call_function(target, tuple(nodes))
    bound = TieBound(1e-3)
    for n, d in zip(nodes, deltas):
        if isinstance(n, torch.fx.Node) and d is not None:
            bound.delta[n] = d
    bound.step(node, values, result)
    return bound.delta[node]


def _lookup_bound(target, x, scale, zp, delta):
    """The bound of the 8-bit lookup ``target(dequantize(q))`` at inputs ``x`` whose delta is
    ``delta`` (real units); returns (bound, the op's values)."""
    g = torch.fx.Graph()
    q = g.placeholder("q")
    dq = g.call_function(_DQ, (q, scale, zp, -128, 127, torch.int8))
    node = g.call_function(target, (dq,))
    bound = TieBound(1e-3)
    bound.delta[dq] = torch.full(x.shape, delta, dtype=torch.float64)
    result = target(x)
    bound.step(node, [x], result)
    return bound.delta[node], result


@settings(max_examples=60, deadline=None)
@given(
    fn=st.sampled_from(sorted(_LOOKUPS)),
    scale=st.sampled_from([0.002, 0.03, 0.25]),
    zp=st.integers(-128, 127),
    reach=st.sampled_from([0.0, 0.3, 1.0, 2.5, 7.0, 40.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_a_lookup_moves_no_more_than_its_bound(fn, scale, zp, reach, seed):
    """An 8-bit lookup (a TABLE upstream lowers the op to) on inputs whose codes may move by
    ``reach`` codes: over every code within reach, the op's float64 value moves no more than
    the bound (tables with steep, flat and stepped regions; any zero point)."""
    rng = np.random.default_rng(seed)
    codes = torch.from_numpy(rng.integers(-128, 128, 64))
    x = (codes.to(torch.float64) - zp) * scale
    if fn == "rsqrt":
        x = x.abs() + scale  # the partition's input to an rsqrt is a variance plus eps
        codes = torch.round(x / scale).to(torch.int64) + zp
        keep = codes <= 127
        x, codes = x[keep], codes[keep]
    target = _LOOKUPS[fn]
    got, result = _lookup_bound(target, x, scale, zp, reach * scale)
    r = int(np.ceil(reach))
    for o in range(-r, r + 1):
        near = (codes + o).clamp(-128, 127)
        moved = (target((near.to(torch.float64) - zp) * scale) - result).abs()
        moved = torch.nan_to_num(moved, nan=float("inf"))  # outside the function's domain
        ok = (moved <= got + 1e-12) | (got >= 1e30)
        assert bool(ok.all()), (fn, o, float((moved - got).max()))


@settings(max_examples=40, deadline=None)
@given(
    fn=st.sampled_from(sorted(set(_LOOKUPS) - {"rsqrt"})),
    scale=st.sampled_from([0.002, 0.03, 0.25]),
    zp=st.integers(-128, 127),
    reach=st.integers(0, 300),
)
def test_a_lookup_bound_is_the_largest_change_within_reach(fn, scale, zp, reach):
    """Whatever the reach (past the grid too), an element's bound is the largest change of the
    op over the codes within reach, saturating at the grid's ends, and no more: a far reach is
    not the table's whole span where the function is flat nearby."""
    target = _LOOKUPS[fn]
    codes = torch.arange(-128, 128)
    x = (codes.to(torch.float64) - zp) * scale
    # Just under ``reach`` codes, so that the rule's rounding up lands on ``reach``.
    got, result = _lookup_bound(target, x, scale, zp, reach * scale * (1 - 1e-9))
    read32 = target(x.to(torch.float32).to(torch.float64))
    want = (read32 - result).abs()  # the float32 reading of each code, as the rule adds it
    for o in range(-reach, reach + 1):
        near = (codes + o).clamp(-128, 127)
        want = torch.maximum(want, (target((near.to(torch.float64) - zp) * scale) - result).abs())
    assert torch.allclose(got, want, rtol=0, atol=1e-12), float((got - want).abs().max())


@settings(max_examples=40, deadline=None)
@given(
    fn=st.sampled_from(["acosh", "log", "rsqrt", "exp", "asin", "atanh"]),
    scale=st.floats(1e-4, 0.3).map(lambda v: float(torch.tensor(v, dtype=torch.float32))),
    zp=st.integers(-128, 127),
)
def test_a_lookup_bounds_the_float32_reading_of_its_codes(fn, scale, zp):
    """The eager model (and upstream's table) reads each code's value as float32 rounds it;
    where the function is steep that alone moves the result (acosh at 1). With no tie anywhere
    (delta 0), the bound still covers the float32 reading of every code, steep ends included."""
    target = getattr(exir_ops.edge.aten, fn).default
    codes = torch.arange(-128, 128)
    x = (codes.to(torch.float64) - zp) * scale
    got, result = _lookup_bound(target, x, scale, zp, 0.0)
    read32 = target(x.to(torch.float32).to(torch.float64))
    both = torch.isfinite(result) & torch.isfinite(read32)
    assert bool(((read32 - result).abs()[both] <= got[both] + 1e-12).all())


def test_acosh_calibrated_at_one_is_delegated_and_bit_exact():
    """Upstream's ``test_acosh_u*_INT[ones]``: calibrated on ones, code 127 reads 1.0 in float32
    (acosh 0) and 1 + 5.9e-8 in float64 (acosh 3.4e-4, 23 output steps). Eager and TOSA agree;
    the lowering check accepts the float32 reading, so the acosh is delegated and the program is
    bit-exact."""
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.runtime import run_pte

    class Acosh(torch.nn.Module):
        def forward(self, x):
            return torch.acosh(x)

    x = (torch.ones(1, 3, 4, 4),)
    spec = EthosUNGCompileSpec("ethos-u85-128")
    q = quantize(Acosh(), x, spec)
    edge, partitioner = lower(q, x, spec)
    assert list(partitioner.report.partitions) == ["ethosu_ng_0"], partitioner.report.cpu_reasons
    assert "aten.acosh.default" not in partitioner.report.cpu_targets.values()
    got = run_pte(edge.to_executorch().buffer, list(x))[0]
    torch.testing.assert_close(got, q(*x), atol=0, rtol=0)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.sampled_from([0.0, 0.01, 0.2, 1.5]),
    rows=st.integers(1, 4),
    cols=st.integers(1, 12),
)
def test_softmax_moves_no_more_than_its_bound(seed, m, rows, cols):
    """Inputs each moved by at most ``m`` (drawn per element, both signs): every softmax output
    stays within the bound."""
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.normal(0, 3, (rows, cols)))
    d = torch.from_numpy(rng.uniform(0, m, (rows, cols)))
    result = torch.softmax(x, -1)
    got = _step(exir_ops.edge.aten._softmax.default, ["x", -1, False], [x, -1, False], [d], result)
    for _ in range(20):
        moved = x + d * torch.from_numpy(rng.choice([-1.0, 1.0], (rows, cols)))
        assert bool(((torch.softmax(moved, -1) - result).abs() <= got + 1e-12).all())


@settings(max_examples=30, deadline=None)
@given(
    value=st.sampled_from([0.0, -3.0, 2.5]), pad=st.lists(st.integers(0, 2), min_size=2, max_size=4)
)
def test_constant_padding_carries_no_delta(value, pad):
    """The padding is a constant: its delta is 0 whatever its value; the rest keeps its own."""
    x = torch.ones(2, 3, 4, dtype=torch.float64)
    d = torch.full(x.shape, 0.5, dtype=torch.float64)
    pad = pad[: 2 * (len(pad) // 2)]
    result = torch.nn.functional.pad(x, pad, value=value)
    got = _step(
        exir_ops.edge.aten.constant_pad_nd.default, ["x", pad, value], [x, pad, value], [d], result
    )
    inner = torch.nn.functional.pad(d, pad, value=0.0)
    assert torch.equal(got, inner)


def _verify(got: int, bound):
    """verify_lowering.verify on one int8 output: exact 0 and the flipped run 0 everywhere,
    TOSA ``got`` at one element, and the tie bound there ``bound`` (None: the partition has an
    op without a rule)."""
    out = TensorSpec(torch.int8, (2, 3), (0, 1), scale=0.1, zero_point=0)
    want = torch.zeros(2, 3, dtype=torch.int64)
    tosa = want.clone()
    tosa[1, 2] = got
    ref, exact = Future(), Future()
    ref.set_result(([[tosa.numpy()]], None, 0.0))
    reference = verify_npu.Reference([[want.numpy()]], ref)
    asked = []

    def bounds(sample):
        asked.append(sample)
        if bound is None:
            return None
        b = torch.zeros(2, 3, dtype=torch.float64)
        b[1, 2] = bound
        return [b]

    exact.set_result(
        verify_lowering.ExactEvaluation(
            runs=[([want], [want], None)],
            seconds=0.0,
            cpu_seconds=0.0,
            samples=reference.samples,
            evaluate=None,
            flipped=lambda s: [want],
            bounds=bounds,
            tables=(0, []),
        )
    )
    verdict = verify_lowering.verify(
        "p", reference, exact, [out], EthosUNGCompileSpec("ethos-u85-256")
    )
    return verdict, asked


def test_the_bound_is_asked_only_beyond_the_flipped_run():
    verdict, asked = _verify(1, 5.0)
    assert verdict.status == "verified" and not asked and verdict.tie_bound == 0


@pytest.mark.parametrize("bound", [0.2, 2.0, 2.6])
def test_an_element_within_its_tie_bound_verifies(bound):
    """One step of rounding plus the bound, rounded up: verified, the bound in the verdict."""
    reach = int(np.ceil(bound))
    verdict, asked = _verify(1 + reach, bound)
    assert verdict.status == "verified" and verdict.max_lsb == 1 + reach and len(asked) == 1
    assert verdict.tie_bound == reach


@pytest.mark.parametrize("bound", [0.0, 1.0, 1.4, None])
def test_an_element_beyond_its_tie_bound_is_a_deviation(bound):
    """A step more than that, or any element beyond the flipped run in a partition with an op
    the bound has no rule for: a deviation."""
    off = 2 + int(np.ceil(bound or 0))
    with pytest.raises(LoweringDeviation, match=f"by {off} LSB"):
        _verify(off, bound)


@pytest.mark.parametrize("seen", [[-1, 3], [3, -1], [2, -1, 5], [0, 4, 1]])
def test_a_partition_without_a_bound_keeps_minus_one(seen):
    """The verdict's bound over outputs and samples: -1 (an op without a rule) is never
    overwritten by a later output's bound, else the largest."""
    verdict = 0
    for b in seen:
        verdict = verify_lowering.worst_bound(verdict, b)
    assert verdict == (-1 if -1 in seen else max(seen))


@pytest.mark.slow
def test_swin_attention_logits_verify_on_ethos_u85():
    """swin_tiny's stage-3 entry (patch merging, norm1, the window's ``q * scale @ k^T``) fed
    its own stage-2 activations: the TOSA graph is 2 LSB from the exact evaluation on logits the
    flipped run moves by at most 1, within the tie bound; one partition, verified (without the
    bound: a deviation, and with the CPU fallback the muls move)."""
    timm = pytest.importorskip("timm")
    from timm.models.swin_transformer import window_partition

    from ethosu_ng.export import lower, quantize

    torch.manual_seed(0)
    swin = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False).eval()
    head = torch.nn.Sequential(swin.patch_embed, swin.layers[0], swin.layers[1])
    ds, blk = swin.layers[2].downsample, swin.layers[2].blocks[0]

    class Logits(torch.nn.Module):
        def forward(self, x):
            x = blk.norm1(ds(x))
            xw = window_partition(x, blk.window_size).view(-1, 49, x.shape[-1])
            b, n, _ = xw.shape
            qkv = blk.attn.qkv(xw).reshape(b, n, 3, blk.attn.num_heads, -1).permute(2, 0, 3, 1, 4)
            q, k, _ = qkv.unbind(0)
            return (q * blk.attn.scale) @ k.transpose(-2, -1)

    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        feats = [head(torch.randn(1, 3, 224, 224, generator=g)) for _ in range(3)]
    spec = EthosUNGCompileSpec("ethos-u85-256", cpu_fallback=False)
    qm = quantize(Logits().eval(), (feats[0],), spec, calibration=[(f,) for f in feats[1:]])
    edge, part = lower(qm, (feats[0],), spec)
    assert len(part.report.partitions) == 1
    (mod,) = [m for _, m in edge.exported_program().graph_module.named_children()]
    v = mod.meta["_delegate_info_meta"].lowering_verification
    # tie_bound is set only where an element lay beyond the flipped run
    assert v.status == "verified" and v.max_lsb == 2 and v.tie_bound >= 2, v


_RESIZES = {
    "nearest": (exir_ops.edge.aten.upsample_nearest2d.vec, {}),
    "nearest_exact": (exir_ops.edge.aten._upsample_nearest_exact2d.vec, {}),
    "bilinear": (exir_ops.edge.aten.upsample_bilinear2d.vec, {"align_corners": False}),
    "bilinear_corners": (exir_ops.edge.aten.upsample_bilinear2d.vec, {"align_corners": True}),
}


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(_RESIZES)),
    seed=st.integers(0, 2**31 - 1),
    m=st.sampled_from([0.0, 0.01, 0.5, 3.0]),
    hw=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    size=st.tuples(st.integers(1, 11), st.integers(1, 11)),
)
def test_a_resize_moves_no_more_than_its_bound(kind, seed, m, hw, size):
    """Inputs each moved by at most their delta (drawn per element, both signs): every output
    of a nearest or bilinear resize to any size stays within the bound."""
    target, flags = _RESIZES[kind]
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.normal(0, 3, (1, 2, *hw)))
    d = torch.from_numpy(rng.uniform(0, m, (1, 2, *hw)))
    args = [list(size), *flags.values(), None]
    result = target(x, *args)
    got = _step(target, ["x", *args], [x, *args], [d], result)
    assert got.shape == result.shape
    for _ in range(20):
        moved = x + d * torch.from_numpy(rng.choice([-1.0, 1.0], x.shape))
        assert bool(((target(moved, *args) - result).abs() <= got + 1e-9).all())


_RANGES = {"int8": (-128, 127, torch.int8), "uint8": (0, 255, torch.uint8)}
_RANGES["int16"] = (-32768, 32767, torch.int16)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([0.0025, 0.03, 0.25]),
    dtype=st.sampled_from(sorted(_RANGES)),
    m=st.sampled_from([0.0, 0.3, 1.0, 5.0]),
    per_channel=st.booleans(),
)
def test_a_quantize_moves_no_more_than_its_bound_whatever_its_zero_point(
    seed, scale, dtype, m, per_channel
):
    """Values each moved by at most their delta (in steps, both signs) are quantized half up
    and saturated to the drawn type's range at drawn zero points (one per channel for a
    per-channel quantize; an asymmetric range saturates its values at ``qmax - zp`` steps):
    no code moves by more than the bound."""
    qmin, qmax, tdtype = _RANGES[dtype]
    rng = np.random.default_rng(seed)
    zps = torch.from_numpy(rng.integers(qmin, qmax + 1, 3)).to(torch.float64)
    zp = zps if per_channel else zps[:1]
    codes = torch.from_numpy(rng.uniform(qmin - 12, qmax + 12, (2, 3, 5)))  # some saturating
    z = zp.view(1, -1, 1)
    x = (codes - z) * scale
    d = torch.from_numpy(rng.uniform(0, m, x.shape)) * scale
    if per_channel:
        target = exir_ops.edge.quantized_decomposed.quantize_per_channel.default
        scales = torch.full((3,), scale, dtype=torch.float64)
        args = [scales, zps.to(torch.int64), 1, qmin, qmax, tdtype]
    else:
        target = exir_ops.edge.quantized_decomposed.quantize_per_tensor.default
        args = [scale, int(zp[0]), qmin, qmax, tdtype]

    def q(v):
        return torch.clamp(torch.floor(v / scale + 0.5) + z, qmin, qmax)

    got = _step(target, ["x", *args], [x, *args], [d], q(x))
    for _ in range(20):
        moved = x + d * torch.from_numpy(rng.uniform(-1.0, 1.0, x.shape))
        assert bool(((q(moved) - q(x)).abs() <= got).all())


# Every op the bound splits by, in the edge graph's copy form and as ATen writes it.
_SPLITS = {
    "split_with_sizes_copy": exir_ops.edge.aten.split_with_sizes_copy.default,
    "split_with_sizes": torch.ops.aten.split_with_sizes.default,
    "split_copy": exir_ops.edge.aten.split_copy.Tensor,
    "split": torch.ops.aten.split.Tensor,
    "unbind_copy": exir_ops.edge.aten.unbind_copy.int,
    "unbind": torch.ops.aten.unbind.int,
    "chunk": torch.ops.aten.chunk.default,
    "tensor_split_sections": torch.ops.aten.tensor_split.sections,
    "tensor_split_indices": torch.ops.aten.tensor_split.indices,
}


def test_the_split_property_covers_every_op_the_bound_splits_by():
    from ethosu_ng.numerics.tie_bound import _SPLIT
    from ethosu_ng.ops import op_name

    assert {op_name(t) for t in _SPLITS.values()} == _SPLIT


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(sorted(_SPLITS)),
    seed=st.integers(0, 2**31 - 1),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
    dtype=st.sampled_from(sorted(_RANGES)),
    scale=st.sampled_from([0.0025, 0.03, 0.25]),
    m=st.sampled_from([0.0, 0.3, 1.0, 5.0]),
)
def test_the_parts_of_a_split_move_no_more_than_their_bound(
    kind, seed, shape, data, dtype, scale, m
):
    """Values each moved by at most their delta (both signs), quantized half up at a drawn zero
    point and split along a drawn dim by every split op (sizes, one size, unbound, chunks,
    sections, indices): every element of every part (``getitem``) moves no more than its bound
    (mobilevitv2's attention splits its quantized qkv projection in three)."""
    qmin, qmax, dtype = _RANGES[dtype]
    zp = data.draw(st.integers(qmin, qmax), label="zp")
    dim = data.draw(st.integers(0, len(shape) - 1), label="dim")
    n = shape[dim]
    cuts = (
        sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=3), label="cuts")) if n > 1 else []
    )
    if kind.startswith("split_with_sizes"):
        split_args = [[b - a for a, b in zip([0, *cuts], [*cuts, n])], dim]
    elif kind.startswith("split"):
        split_args = [data.draw(st.integers(1, n), label="size"), dim]
    elif kind in ("chunk", "tensor_split_sections"):
        split_args = [data.draw(st.integers(1, n + 1), label="pieces"), dim]
    elif kind == "tensor_split_indices":
        split_args = [cuts, dim]
    else:
        split_args = [dim]
    rng = np.random.default_rng(seed)
    codes = torch.from_numpy(rng.uniform(qmin - 10, qmax + 10, shape))  # some saturating
    x = (codes - zp) * scale
    d = torch.from_numpy(rng.uniform(0, m, shape)) * scale
    quantize = exir_ops.edge.quantized_decomposed.quantize_per_tensor.default
    qargs = [scale, zp, qmin, qmax, dtype]

    def q(v):
        return torch.clamp(torch.floor(v / scale + 0.5) + zp, qmin, qmax)

    g = torch.fx.Graph()
    xn = g.placeholder("x")
    qn = g.call_function(quantize, (xn, *qargs))
    sn = g.call_function(_SPLITS[kind], (qn, *split_args))
    parts = _SPLITS[kind](q(x), *split_args)
    items = [g.call_function(operator.getitem, (sn, k)) for k in range(len(parts))]
    bound = TieBound(1e-3)
    bound.delta[xn] = d
    bound.step(qn, [x, *qargs], q(x))
    bound.step(sn, [q(x), *split_args], parts)
    for k, node in enumerate(items):
        bound.step(node, [parts, k], parts[k])
    for _ in range(20):
        moved = x + d * torch.from_numpy(rng.uniform(-1.0, 1.0, shape))
        for k, part in enumerate(_SPLITS[kind](q(moved), *split_args)):
            assert bool(((part - parts[k]).abs() <= bound.delta[items[k]]).all()), (kind, k)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.sampled_from([0.0, 0.01, 0.5, 3.0]),
    hw=st.tuples(st.integers(2, 6), st.integers(2, 6)),
    kernel=st.integers(1, 2),
    stride=st.integers(1, 2),
)
def test_a_max_pool_with_indices_bounds_its_maxima_not_its_indices(seed, m, hw, kernel, stride):
    """A max pool as the edge graph has it (``max_pool2d_with_indices``, its maxima read by
    ``getitem``): inputs each moved by at most their delta move no maximum by more than its
    bound; the indices have no grid, so reading them leaves the bound unknown."""
    from ethosu_ng.numerics.tie_bound import Unbounded

    target = exir_ops.edge.aten.max_pool2d_with_indices.default
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.normal(0, 3, (1, 2, *hw)))
    d = torch.from_numpy(rng.uniform(0, m, x.shape))
    args = [[kernel, kernel], [stride, stride]]
    g = torch.fx.Graph()
    xn = g.placeholder("x")
    pool = g.call_function(target, (xn, *args))
    maxima, indices = (
        g.call_function(operator.getitem, (pool, 0)),
        g.call_function(operator.getitem, (pool, 1)),
    )
    bound = TieBound(1e-3)
    bound.delta[xn] = d
    result = target(x, *args)
    bound.step(pool, [x, *args], result)
    bound.step(maxima, [result, 0], result[0])
    with pytest.raises(Unbounded):
        bound.step(indices, [result, 1], result[1])
    got = bound.delta[maxima]
    for _ in range(20):
        moved = x + d * torch.from_numpy(rng.uniform(-1.0, 1.0, x.shape))
        assert bool(((target(moved, *args)[0] - result[0]).abs() <= got + 1e-12).all())


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.sampled_from([0.0, 0.01, 0.5, 3.0]),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    op=st.sampled_from(["amin", "amax"]),
    data=st.data(),
)
def test_a_minimum_or_maximum_moves_no_more_than_its_bound(seed, m, shape, op, data):
    """``amin`` and ``amax`` over drawn dims, with and without ``keepdim``: inputs each moved by
    at most their delta move no result by more than its bound."""
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    keepdim = data.draw(st.booleans())
    target = getattr(exir_ops.edge.aten, op).default
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.normal(0, 3, shape))
    d = torch.from_numpy(rng.uniform(0, m, shape))
    args = [dims, keepdim]
    got = _step(target, ["x", *args], [x, *args], [d, None, None], target(x, *args))
    for _ in range(20):
        moved = x + d * torch.from_numpy(rng.uniform(-1.0, 1.0, shape))
        assert bool(((target(moved, *args) - target(x, *args)).abs() <= got + 1e-12).all())
