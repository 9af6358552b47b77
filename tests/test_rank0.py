# SPDX-License-Identifier: BSD-3-Clause
"""Rank-0 tensors inside a partition (``passes/rank0_as_rank1.py``): a select on a 1-D tensor, a
reduction to a scalar, a squeeze to rank 0, a bool reduction (U85) are delegated, every compute
op on the NPU, and the program matches the eager quantized model within 1 LSB (bool exactly)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower, quantize
from ethosu_ng.ops import NO_COMPUTE_OPS, is_compute
from ethosu_ng.runtime import run_pte
from ethosu_ng.tools import upstream_op_tests as op_tests

U55, U85 = "ethos-u55-128", "ethos-u85-128"


def _all(x):
    return tuple(range(x.dim()))


# kind -> (forward, whether its operand is bool (U85 only), ops U55 leaves on the CPU)
KINDS = {
    "select_1d": (lambda x: torch.sigmoid(x.reshape(-1).select(0, -1)), False, ()),
    "mean": (lambda x: x.mean(), False, ()),
    "mean_dims": (lambda x: x.mean(dim=_all(x)), False, ()),
    "sum": (lambda x: x.sum() * 0.5, False, ()),
    "amax": (lambda x: torch.amax(x, dim=_all(x)), False, ()),
    "amin": (lambda x: torch.amin(x, dim=_all(x)) + x.mean(), False, ()),
    "amin_no_dim": (lambda x: torch.amin(x), False, ()),
    "squeeze": (lambda x: torch.amax(x, dim=_all(x), keepdim=True).squeeze() - 1.0, False, ()),
    "scalar_times_tensor": (lambda x: x * x.mean(), False, ()),
    # a cond predicate: the bool comparison stays on the U55's CPU, the sum does not
    "sum_compare": (lambda x: x.sum() > 0.1, False, ("aten.gt.Tensor",)),
    "any": (lambda x: (x > 0.5).any(), True, ()),
    "any_dims": (lambda x: (x > 0.5).any(dim=_all(x)) | (x < -0.5).any(), True, ()),
}


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _run(kind, shape, seed, target):
    """(max difference, unit, CPU compute ops with their reasons)."""
    fn = KINDS[kind][0]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(_Fn(fn).eval(), (x,), spec, calibration=[(x,)])
    edge, partitioner = lower(q, (x,), spec)
    got = op_tests._outputs(run_pte(edge.to_executorch().buffer, [x]))
    with torch.no_grad():
        want = op_tests._outputs(q(x))
    worst, unit = op_tests.compare(got, want, io_quantization(edge))
    report = partitioner.report
    cpu = {
        op: report.cpu_reasons.get(name, "")
        for name, op in report.cpu_targets.items()
        # a partition of views alone holds no NPU compute and is not delegated (mean of one
        # element is a view)
        if is_compute(op) and op not in NO_COMPUTE_OPS
    }
    return worst, unit, cpu


def _check(kind, shape, seed, target):
    worst, unit, cpu = _run(kind, shape, seed, target)
    allowed = set(KINDS[kind][2]) if target == U55 else set()
    assert set(cpu) <= allowed, cpu
    assert worst <= (0 if KINDS[kind][1] or allowed else 1), (worst, unit)


SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
CASES = dict(
    kind=st.sampled_from(sorted(KINDS)),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
    seed=st.integers(0, 2**16),
    target=st.sampled_from([U55, U85]),
)


def _assume_target_has_bool(kind, target):
    # A bool tensor stays on the CPU where TOSA has none (U55's profile); U85 delegates it.
    return not (KINDS[kind][1] and target == U55)


@pytest.mark.parametrize(
    "kind,shape,target",
    [("select_1d", (7,), U55), ("any", (3, 4), U85)],
)
def test_rank0_results_are_delegated(kind, shape, target):
    _check(kind, shape, 0, target)


@pytest.mark.slow
@settings(max_examples=40, **SETTINGS)
@given(**CASES)
def test_rank0_results_are_delegated_many(kind, shape, seed, target):
    if _assume_target_has_bool(kind, target):
        _check(kind, shape, seed, target)
