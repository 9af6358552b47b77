# SPDX-License-Identifier: BSD-3-Clause
"""Compiler failures never kill the export (issue #8), with a fake Vela that fails on chosen ops.

The fake runs where Vela runs (a child process with the same command line); when the TOSA graph
it is given holds every op type listed in FAKE_VELA_FAIL_ON it fails the way asked (a real
SIGSEGV, a hang, or a clean error exit), otherwise it hands over to the real Vela. So isolation is
real (our process survives a segfaulting child), and the partitions that remain are real Vela
output whose numerics are checked on the TOSA reference model (<= 1 LSB per delegate).
"""

import warnings

import pytest
import torch
from conftest import calibration_batches
from torch import nn

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates
from ethosu_ng.partitioning.boundary import float_boundary_tensors
from ethosu_ng.vela import compiler as vela_compiler
from ethosu_ng.vela.compiler import VelaError

FAKE_VELA = r"""
import os, signal, sys, time
from tosa.Op import Op
from tosa.TosaGraph import TosaGraph

names = {getattr(Op, k): k for k in dir(Op) if not k.startswith("_")}
block = TosaGraph.GetRootAs(bytearray(open(sys.argv[-1], "rb").read()), 0).Regions(0).Blocks(0)
ops = {names.get(block.Operators(k).Op()) for k in range(block.OperatorsLength())}
bad = set(os.environ["FAKE_VELA_FAIL_ON"].split(","))
if bad <= ops:
    how = os.environ.get("FAKE_VELA_HOW", "segfault")
    print("fake vela: refusing", sorted(bad), flush=True)
    if how == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "hang":
        time.sleep(3600)
    sys.exit(1)
from ethosu.vela.vela import main
sys.exit(main(sys.argv[1:]))
"""


class Blocks(nn.Module):
    """Three identical conv -> relu -> maxpool(3, 1, 1) blocks, then a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 1, 1))
            for _ in range(3)
        )
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x) + x
        return self.head(x.mean((2, 3)))


@pytest.fixture
def fake_vela(monkeypatch):
    monkeypatch.setattr(vela_compiler, "_VELA_MAIN", FAKE_VELA)

    def fail_on(ops, how="segfault"):
        monkeypatch.setenv("FAKE_VELA_FAIL_ON", ",".join(ops))
        monkeypatch.setenv("FAKE_VELA_HOW", how)

    return fail_on


def _quantized(spec):
    torch.manual_seed(0)
    model, x = Blocks().eval(), (torch.randn(1, 3, 16, 16),)
    return quantize(model, x, spec, calibration=calibration_batches(x)), x


def _lower(q, x, spec, disabled_passes=()):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        edge, part = lower(q, x, spec, disabled_passes=disabled_passes)
    return edge, part, [str(w.message) for w in caught if "NPU compiler failed" in str(w.message)]


def _check_fallback(edge, part, warned, x, culprit_op):
    report = part.report
    moved = {report.cpu_targets[n] for n in report.compiler_fallback}
    assert all(m.startswith(culprit_op) for m in moved), report.compiler_fallback
    assert len(report.compiler_fallback) == 3  # the three identical blocks' pools
    for name, why in report.compiler_fallback.items():
        assert report.cpu_reasons[name] == why and "fake vela: refusing" in why
    assert warned and all(n in warned[0] for n in report.compiler_fallback)
    assert float_boundary_tensors(edge.exported_program()) == []
    assert len(report.partitions) >= 2
    results = check_delegates(edge, x)
    assert len(results) == len(report.partitions)
    assert max(r.worst for r in results) <= 1, [(r.name, r.max_lsb) for r in results]
    edge.to_executorch()


def test_segfault_is_isolated_bisected_and_falls_back(fake_vela):
    fake_vela(["MAX_POOL2D"])
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    q, x = _quantized(spec)
    edge, part, warned = _lower(q, x, spec)
    assert "crashed (SIGSEGV)" in next(iter(part.report.compiler_fallback.values()))
    _check_fallback(edge, part, warned, x, "aten.max_pool2d")
    # The first pool is found by bisection; the other two match its signature, no new search:
    # one compile checks that the partition without them compiles (9 candidates in all).
    assert 0 < part.report.fallback_compiles <= 9, part.report.fallback_compiles


def test_op_failing_only_in_combination_is_found(fake_vela):
    # Neither a pool nor an add alone upsets the fake; a graph holding both does.
    fake_vela(["MAX_POOL2D", "ADD"], how="error")
    spec = EthosUNGCompileSpec("ethos-u85-256", embed_tosa=True)
    q, x = _quantized(spec)
    edge, part, warned = _lower(q, x, spec)
    moved = {part.report.cpu_targets[n] for n in part.report.compiler_fallback}
    assert moved and all(m.startswith(("aten.max_pool2d", "aten.add")) for m in moved), moved
    assert "failed (exit 1)" in next(iter(part.report.compiler_fallback.values()))
    assert float_boundary_tensors(edge.exported_program()) == []
    assert max(r.worst for r in check_delegates(edge, x)) <= 1
    edge.to_executorch()


def test_hang_is_a_timeout_and_falls_back(fake_vela):
    fake_vela(["MAX_POOL2D"], how="hang")
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True, vela_timeout_s=4)
    q, x = _quantized(spec)
    edge, part, warned = _lower(q, x, spec)
    assert "timed out after 4 s" in next(iter(part.report.compiler_fallback.values()))
    _check_fallback(edge, part, warned, x, "aten.max_pool2d")


def test_without_fallback_the_error_names_partition_target_and_last_words(fake_vela):
    fake_vela(["MAX_POOL2D"])
    spec = EthosUNGCompileSpec("ethos-u55-128", cpu_fallback=False)
    q, x = _quantized(spec)
    with pytest.raises(VelaError) as e:
        lower(q, x, spec)
    msg = str(e.value)
    assert "'ethosu_ng_0'" in msg and "ethos-u55-128" in msg and "crashed (SIGSEGV)" in msg
    assert "fake vela: refusing ['MAX_POOL2D']" in msg


def test_compiled_once_preprocess_reuses_the_partitioner_compile(monkeypatch):
    from ethosu_ng import backend, partitioner
    from ethosu_ng.compiler.pipeline import compile_partitions

    compiled = []

    def counting(programs, spec):
        compiled.extend(name for name, _ in programs)
        return compile_partitions(programs, spec)

    monkeypatch.setattr(partitioner, "compile_partitions", counting)
    monkeypatch.setattr(backend, "compile_partitions", counting)
    spec = EthosUNGCompileSpec("ethos-u85-256")
    q, x = _quantized(spec)
    edge, part = lower(q, x, spec, cpu_ops=["aten.max_pool2d.default"])
    assert len(part.report.partitions) == 4
    assert sorted(compiled) == sorted(part.report.partitions), compiled


def test_real_vela_segfault_falls_back(monkeypatch):
    """Real Vela (5.1.0 and 5.2.0) on a shifted-window attention block for U55, without the
    rewrite and the predictive limit that normally avoid the crashing slice: Vela segfaults, the
    search finds the op."""
    from models import ShiftedWindowAttention

    from ethosu_ng.partitioning.target_limits import TargetLimits
    from ethosu_ng.passes import SliceOnMergedAxisPass

    monkeypatch.setattr(TargetLimits, "why_not", lambda self, node: None)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn((1, 8, 8, 16), generator=g),) for _ in range(2)]
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    q = quantize(ShiftedWindowAttention().eval(), data[0], spec, calibration=data)
    edge, part, warned = _lower(q, data[0], spec, disabled_passes=[SliceOnMergedAxisPass])
    fallback = part.report.compiler_fallback
    print({n: part.report.cpu_targets[n] for n in fallback}, part.report.fallback_compiles)
    assert fallback and warned
    assert all("crashed (SIGSEGV)" in why for why in fallback.values()), fallback
    assert float_boundary_tensors(edge.exported_program()) == []
    assert max(r.worst for r in check_delegates(edge, data[0])) <= 1
    edge.to_executorch()


def test_fallback_that_runs_out_of_rounds_says_so(fake_vela, monkeypatch):
    from ethosu_ng import partitioner

    # No fallback round allowed: the first failure is final, and the error says why.
    fake_vela(["MAX_POOL2D"], how="error")
    monkeypatch.setattr(partitioner, "_MAX_FALLBACK_ROUNDS", 0)
    spec = EthosUNGCompileSpec("ethos-u55-128")
    q, x = _quantized(spec)
    with pytest.raises(VelaError) as e:
        lower(q, x, spec)
    msg = str(e.value)
    assert "failed (exit 1); CPU fallback gave up: still failing after 0 round(s)" in msg, msg
    assert "ethos-u55-128" in msg and "fake vela: refusing ['MAX_POOL2D']" in msg
