# SPDX-License-Identifier: BSD-3-Clause
"""RelayoutElementwiseRegion: an element-wise region between layout transposes runs in their
layout, over drawn regions of rank 3 and 4 behind any permutation (fan-out of the entering
tensor, residual adds, reductions over every axis, broadcast constants of every shape, a second
entering transpose by the same or another permutation, extra exits, a reader that is not a
transpose, a graph output inside): bit-exact on the reference model, no transpose added, every
one gone where the region qualifies, and never more Vela cycles than without it on U55, U65 and
U85."""

import itertools

import numpy as np
import pytest
from _tosa_builder import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tosa_optimize import count, optimised

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.tosa_optimize.pipeline import optimize
from ethosu_ng.tosa_optimize.rewrites._layout import inverse, permuted
from ethosu_ng.tosa_optimize.rewrites.relayout_elementwise_region import (
    RelayoutElementwiseRegion,
)
from ethosu_ng.tosa_optimize.verify import check_bit_exact
from ethosu_ng.vela.compiler import compile_tosa

TO_NCHW = (0, 3, 1, 2)
TARGETS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")


def _settings(n):
    return settings(
        max_examples=n, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )


@st.composite
def regions(draw):
    """Regions of rank 3 and 4 behind any permutation (the NCHW<->NHWC pair of a CNN, a
    token transpose of a transformer, others), their operands drawn over every broadcast."""
    rank = draw(st.sampled_from((3, 4)))
    shape = [1] + [draw(st.sampled_from((1, 2, 3, 5, 8))) for _ in range(rank - 1)]
    perms = [p for p in itertools.permutations(range(rank)) if list(p) != sorted(p)]
    perm = draw(st.sampled_from(perms))
    inner = permuted(shape, perm)  # the region's tensors' shape
    return dict(
        shape=shape,
        perm=perm,
        # each dimension of the broadcast constant kept or 1 (per channel, per position, ...)
        bshape=tuple(d if draw(st.booleans()) else 1 for d in inner),
        # the constant stored in its shape, or flat and reshaped (upstream's per-channel form)
        reshaped=draw(st.booleans()),
        # MUL by a second operator's output transposed into the region's shape: by the same
        # permutation, or by another one (which disqualifies the region)
        second=draw(st.sampled_from((None, "same", "same", "other"))),
        other=draw(st.sampled_from([p for p in perms if p != perm] or [perm])),
        residual=draw(st.booleans()),  # the entering tensor is also read by the last ADD
        norm=draw(st.booleans()),  # minus its sum over every axis but the first
        extra_exit=draw(st.booleans()),  # an inner tensor also leaves through a transpose
        next_block=draw(st.booleans()),  # the entering tensor read by a transpose back
        # disqualifies the region
        blocker=draw(st.sampled_from((None, None, None, "reshape", "output"))),
    )


def region(hwc, **flags):
    """A case of ``regions()``: per-channel constant, one block, nothing blocking, unless
    ``flags`` say otherwise."""
    case = dict(
        shape=[1, *hwc],
        perm=TO_NCHW,
        bshape=(1, hwc[2], 1, 1),
        reshaped=False,
        second=None,
        other=TO_NCHW,
        residual=False,
        norm=False,
        extra_exit=False,
        next_block=False,
        blocker=None,
    )
    case.update(flags)
    return case


def with_and_without(tosa: bytes, target: str):
    """The pipeline's program given the spec, with and without the rewrite, and Vela's total
    cycles of each."""
    spec = EthosUNGCompileSpec(target)
    ours = optimize(tosa, target=target, spec=spec)
    kept = optimize(tosa, target=target, spec=spec, disabled=[RelayoutElementwiseRegion])
    cycles = [float(compile_tosa(g.tosa, spec, "p").summary["cycles_total"]) for g in (ours, kept)]
    return ours, cycles


def build(case) -> bytes:
    """x -> CLAMP -> T(perm) -> RESCALE -> ADD(constant) [-> MUL(T(CLAMP(z)))] [-> SUB(sum over
    every axis but the first)] [-> ADD(residual)] -> RESCALE int8 -> T(perm^-1) -> CLAMP ->
    output. For the 4-D NCHW case: x is NHWC, the region NCHW."""
    shape, perm = case["shape"], tuple(case["perm"])
    inv = inverse(perm)
    rng = np.random.default_rng(0)
    b = Builder()
    t = b.transpose(b.clamp(b.input(shape), -90, 90), perm)
    r = b.rescale(t, "INT32", in_zp=3)
    values = rng.integers(-999, 999, case["bshape"])
    if case["reshaped"]:
        constant = b.reshape(b.const(values.reshape(-1), "INT32"), list(case["bshape"]))
    else:
        constant = b.const(values, "INT32")
    y = b.binary("ADD", r, constant)
    if case["second"]:
        q = perm if case["second"] == "same" else tuple(case["other"])
        z_shape = permuted(b.shape(t), inverse(q))
        z = b.transpose(b.clamp(b.input(z_shape), -50, 50), q)
        y = b.binary("MUL", y, b.rescale(z, "INT32"))
    if case["norm"]:
        total = r
        for axis in range(1, len(shape)):
            reduced = b.shape(total)
            reduced[axis] = 1
            total = b.op("REDUCE_SUM", [total], reduced, "INT32", axis=axis)
        y = b.binary("SUB", y, total)
    if case["residual"]:
        y = b.binary("ADD", y, r)
    out = b.rescale(y, "INT8", shift=38, out_zp=-5)
    b.output(b.clamp(b.transpose(out, inv), -100, 100))
    if case["extra_exit"]:
        inner = b.rescale(r, "INT8", shift=31)
        b.output(b.clamp(b.transpose(inner, inv), -60, 60))
    if case["next_block"]:
        b.output(b.clamp(b.transpose(t, inv), -70, 70))
    if case["blocker"] == "reshape":
        b.output(b.clamp(b.reshape(out, [1, int(np.prod(b.shape(out)))]), -80, 80))
    elif case["blocker"] == "output":
        b.output(out)
    return b.tosa()


@_settings(80)
@given(regions())
def test_a_region_runs_in_the_layout_around_it_bit_exactly(case):
    tosa = build(case)
    result = optimised(tosa)  # same IO, no transpose added, bit-exact on the reference model
    other = case["second"] == "other" and tuple(case["other"]) != tuple(case["perm"])
    if case["blocker"] is None and not other:
        # Every transpose goes: the region runs in NHWC end to end.
        assert count(result.tosa)["TRANSPOSE"] == 0, result.applied
    else:
        # An NCHW tensor a blocker reads must stay, an operand in another layout cannot be
        # read untransposed: the region is left as it is.
        assert not result.applied.get("RelayoutElementwiseRegion")


def test_a_repmixer_region_with_fan_out_is_taken_whole():
    """The shape SinkTransposeToCancel cannot take (the entering tensor has three readers):
    this rewrite is what removes its transposes."""
    case = region(
        (4, 4, 8), reshaped=True, second="same", residual=True, extra_exit=True, next_block=True
    )
    tosa = build(case)
    result = optimised(tosa)
    assert result.applied.get("RelayoutElementwiseRegion", 0) >= 1
    assert count(result.tosa)["TRANSPOSE"] == 0
    without = optimize(tosa, disabled=[RelayoutElementwiseRegion])
    assert count(without.tosa)["TRANSPOSE"] >= 3


@_settings(60)
@given(regions(), st.sampled_from(TARGETS))
def test_a_relaid_region_never_costs_vela_more(case, target):
    """Given the compile spec, a region is relaid out only where Vela estimates the region with
    its neighbours cheaper (the probe): the whole program never costs more."""
    tosa = build(case)
    ours, cycles = with_and_without(tosa, target)
    if not ours.applied.get("RelayoutElementwiseRegion"):
        return  # the same program as without it
    check_bit_exact(tosa, ours.tosa, trials=1, seed=3)
    assert cycles[0] <= cycles[1], (case, cycles)


def test_a_region_vela_runs_dearer_channels_last_is_left_given_a_spec():
    """Two channels under a row of five: channels-last costs Vela more on U85 (measured 455
    against 366 cycles), so with the spec the probe keeps the region as it is; without one it is
    relaid out wherever a transpose goes."""
    tosa = build(region((1, 5, 2), residual=True))
    spec = EthosUNGCompileSpec("ethos-u85-256")
    assert optimize(tosa).applied.get("RelayoutElementwiseRegion")
    assert not optimize(tosa, target=spec.target, spec=spec).applied.get(
        "RelayoutElementwiseRegion"
    )


@pytest.mark.parametrize("target", TARGETS)
def test_the_repmixer_region_costs_fewer_cycles(target):
    """FastViT's first stage in miniature: fewer cycles on every target, per Vela."""
    tosa = build(region((16, 16, 48), second="same", residual=True, next_block=True))
    ours, cycles = with_and_without(tosa, target)
    assert ours.applied.get("RelayoutElementwiseRegion")
    assert cycles[0] < cycles[1], cycles


def test_a_probe_that_fails_leaves_the_region_as_it_is(monkeypatch):
    """A probe graph that cannot be built or compiled is no export error: the region keeps its
    layout."""
    from ethosu_ng.tosa_optimize.rewrites import _probe
    from ethosu_ng.tosa_optimize.rewrites import relayout_elementwise_region as rewrite

    def fails(graph, region):
        raise ValueError("planted")

    monkeypatch.setattr(rewrite, "_probe_graph", fails)
    monkeypatch.setattr(rewrite, "_DECIDED", _probe.Decisions())
    tosa = build(region((16, 16, 48), second="same", residual=True, next_block=True))
    spec = EthosUNGCompileSpec("ethos-u85-256")
    result = optimize(tosa, target=spec.target, spec=spec)
    assert not result.applied.get("RelayoutElementwiseRegion")
