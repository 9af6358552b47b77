# SPDX-License-Identifier: BSD-3-Clause
"""The failure classes of upstream's op tests (docs/upstream-op-tests.md), each as a property over
its class: the program exports, runs on the host, and matches the eager quantized model within
1 LSB (integer outputs exactly)."""

from __future__ import annotations

import pytest
import torch

from ethosu_ng import EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower, quantize
from ethosu_ng.partitioning.partition_program import _tensor_digest
from ethosu_ng.passes.non_core_aten_ops import CORE_ATEN_FORMS
from ethosu_ng.runtime import run_pte
from ethosu_ng.tools import upstream_op_tests as op_tests

U55, U85 = "ethos-u55-128", "ethos-u85-128"


def _run(model, inputs, target, cpu_ops=()):
    """(max difference against the eager quantized model, its unit, the partitioner)."""
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(model.eval(), inputs, spec, calibration=[inputs])
    edge, partitioner = lower(q, inputs, spec, cpu_ops=cpu_ops)
    got = op_tests._outputs(run_pte(edge.to_executorch().buffer, list(inputs)))
    with torch.no_grad():
        want = op_tests._outputs(q(*inputs))
    worst, unit = op_tests.compare(got, want, io_quantization(edge))
    return worst, unit, partitioner


# ------------------------------------------------------------ constants of every rank and dtype


@pytest.mark.parametrize(
    "dtype",
    [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float32, torch.bool],
)
@pytest.mark.parametrize("shape", [(), (1,), (3,), (2, 3)])
def test_partition_fingerprint_digests_constants_of_any_rank(dtype, shape):
    """A partition's constants (a clamp's int32 tensor bound is rank 0) digest as their bytes:
    equal tensors equal, a changed element different."""
    t = torch.arange(6)[: torch.Size(shape).numel()].reshape(shape).to(dtype)
    assert _tensor_digest(t) == _tensor_digest(t.clone())
    if t.numel() and dtype != torch.bool:
        changed = t.clone()
        changed.view(-1)[0] += 1
        assert _tensor_digest(changed) != _tensor_digest(t)


class _ClampTensorBounds(torch.nn.Module):
    def __init__(self, lo, hi):
        super().__init__()
        self.lo, self.hi = lo, hi

    def forward(self, x):
        return torch.clamp(x, self.lo, self.hi)


@pytest.mark.parametrize("target", [U55, U85])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int8])
def test_integer_clamp_with_rank0_tensor_bounds_lowers(target, dtype):
    lo, hi = torch.tensor(-5, dtype=dtype), torch.tensor(7, dtype=dtype)
    x = torch.randint(-20, 20, (2, 8), dtype=dtype, generator=torch.Generator().manual_seed(0))
    worst, _, _ = _run(_ClampTensorBounds(lo, hi), (x,), target)
    assert worst == 0


# ------------------------------------------------------------ ops outside core ATen


class _Unary(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class _Shift(torch.nn.Module):
    def __init__(self, left, scalar):
        super().__init__()
        self.left, self.scalar = left, scalar

    def forward(self, x, y):
        other = 2 if self.scalar else y
        return x << other if self.left else x >> other


@pytest.mark.parametrize("target", [U55, U85])
@pytest.mark.parametrize("pinned", [False, True])
@pytest.mark.parametrize("domain", ["inside", "at_one"])
def test_erfinv_exports_and_runs_delegated_or_on_the_cpu(target, pinned, domain):
    """Quantized erfinv: a TABLE on the NPU where its table is finite; on the CPU (pinned, or
    infinite at an input code) in core ATen. Either way within 1 LSB of the eager model."""
    hi = 0.9 if domain == "inside" else 1.0
    x = torch.linspace(-hi, hi, 64).reshape(1, 64)
    cpu_ops = ["aten.erfinv.default"] if pinned else []
    worst, unit, partitioner = _run(_Unary(torch.erfinv), (x,), target, cpu_ops)
    cpu = set(partitioner.report.cpu_targets.values())
    assert "aten.erfinv.default" not in cpu or not (pinned or domain == "at_one"), cpu
    if domain == "inside" and not pinned:
        assert partitioner.report.partitions and "aten.erfinv.default" not in cpu
    if domain == "inside":
        assert worst <= 1, (worst, unit)


@pytest.mark.parametrize("target", [U55, pytest.param(U85, marks=pytest.mark.slow)])
def test_erfinv_table_the_npu_compiler_fails_runs_on_the_cpu(target, monkeypatch):
    """An erfinv kept whole for a TABLE whose compile fails is moved to the CPU, which has no
    erfinv kernel: it is lowered again in core ATen, and the program loads, runs and matches."""
    from ethosu_ng.vela import compiler as vela_compiler
    from ethosu_ng.vela.compiler import VelaError

    def fails(tosa, spec, partition="delegate"):
        raise VelaError(partition, spec.target, "planted failure", "planted")

    monkeypatch.setattr(vela_compiler, "compile_tosa", fails)
    x = torch.linspace(-0.9, 0.9, 64).reshape(1, 64)
    with pytest.warns(UserWarning, match="no kernel"):
        worst, unit, partitioner = _run(_Unary(torch.erfinv), (x,), target)
    assert "aten.erfinv.default" in partitioner.cpu_ops
    assert not partitioner.report.no_cpu_kernel
    assert worst <= 1, (worst, unit)


def test_erfinv_in_core_aten_matches_torch():
    """The CPU form of erfinv against torch.erfinv, over (-1.1, 1.1) with the poles: same NaN
    and infinities, finite values within 4 float32 ulps (of 2**-23 relative)."""
    form = CORE_ATEN_FORMS[torch.ops.aten.erfinv.default]
    x = torch.cat([torch.linspace(-1.1, 1.1, 100_001), torch.tensor([-1.0, 1.0, 0.0])])
    got, want = form(x), torch.erfinv(x)
    assert torch.equal(got.isnan(), want.isnan())
    inf = want.isinf()
    assert torch.equal(got[inf], want[inf])
    fin = torch.isfinite(want)
    rel = ((got - want).abs() / want.abs().clamp(min=1e-30))[fin & (want != 0)]
    assert rel.max() <= 4 * 2.0**-23, rel.max()


@pytest.mark.parametrize("target", [U55, U85])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("scalar,dtype", [(True, torch.int8), (False, torch.int32)])
def test_bitwise_shifts_export_and_run(target, left, scalar, dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-100, 100, (2, 5), dtype=dtype, generator=g)
    y = torch.randint(0, 5, (2, 5), dtype=dtype, generator=g)
    worst, unit, _ = _run(_Shift(left, scalar), (x, y), target)
    # Integer outputs are exact: Ethos-U55's SHR rounds, so the verified compile moves a right
    # shift there to the CPU rather than ship an answer 1 off.
    assert unit == "abs" and worst == 0, worst


# ------------------------------------------------------------ grouped transposed convolution


@pytest.mark.parametrize("target", [U55, U85])
@pytest.mark.parametrize("groups,cin,cout", [(2, 4, 6), (3, 3, 3), (1, 4, 6)])
def test_grouped_conv_transpose_quantizes_and_runs(target, groups, cin, cout):
    torch.manual_seed(0)
    model = torch.nn.ConvTranspose2d(cin, cout, 3, stride=2, groups=groups)
    x = torch.randn(1, cin, 6, 6)
    worst, unit, _ = _run(model, (x,), target)
    assert worst <= 1, (worst, unit)


# ------------------------------------------------------------ index ops and conv3d on the CPU


class _Gather(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, index):
        return torch.gather(x, self.dim, index)


@pytest.mark.parametrize("target", [U55, U85])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_gather_with_int64_index_runs_where_it_is_not_delegated(target, dim, dtype):
    """U55 never delegates a gather; U85 takes some (upstream: dim 1 of rank-2/3 tensors) and
    leaves the rest on the CPU. Either way the program runs and matches the eager model."""
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(4, 5, generator=g) * 10).to(dtype)
    index = torch.randint(0, x.shape[dim], (3, 4), generator=g)
    worst, _, _ = _run(_Gather(dim), (x, index), target)
    assert worst <= 1, worst


@pytest.mark.parametrize(
    "kernel,stride,padding,dilation",
    [
        ((2, 3, 3), (1, 1, 1), 0, 1),
        ((3, 3, 3), (2, 2, 2), 1, 1),
        ((1, 3, 3), (2, 1, 1), (1, 1, 1), 1),
        ((3, 1, 1), (1, 2, 2), (2, 0, 0), (2, 1, 1)),
    ],
)
def test_conv3d_the_u55_does_not_take_runs_on_the_cpu(kernel, stride, padding, dilation):
    torch.manual_seed(0)
    model = torch.nn.Conv3d(3, 4, kernel, stride, padding, dilation)
    x = torch.randn(1, 3, 7, 8, 8)
    worst, unit, _ = _run(model, (x,), U55)
    assert worst <= 1, (worst, unit)
