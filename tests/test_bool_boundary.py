# SPDX-License-Identifier: BSD-3-Clause
"""bool tensors at delegate boundaries: on Ethos-U85 a comparison or logical op's bool result or
operand crosses a delegate boundary typed as bool (IO dtype code 6), and the program equals the
eager quantized model exactly; on Ethos-U55/U65 (TOSA +u55: no bool tensors) the bool stays on
the CPU with the reason in the report."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.ops import is_call_delegate
from ethosu_ng.runtime import run_pte

U85_TARGETS = [f"ethos-u85-{m}" for m in (128, 256, 512, 1024, 2048)]

COMPARISONS = {
    "eq": (torch.eq, "aten.eq.Tensor"),
    "ne": (torch.ne, "aten.ne.Tensor"),
    "lt": (torch.lt, "aten.lt.Tensor"),
    "le": (torch.le, "aten.le.Tensor"),
    "gt": (torch.gt, "aten.gt.Tensor"),
    "ge": (torch.ge, "aten.ge.Tensor"),
}
# Binary ops on two bools, unary ops on one, and a reduction (keepdim: the result broadcasts).
LOGICAL = {
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor,
    "logical_not": lambda a, b: torch.logical_not(a),
    "bitwise_not": lambda a, b: torch.bitwise_not(a),
    "any": lambda a, b: torch.any(a, dim=-1, keepdim=True),
}
KINDS = sorted(COMPARISONS) + sorted(LOGICAL)
SIDES = ("input", "output", "both")


class BoolAtBoundary(torch.nn.Module):
    """``kind`` computes a bool; ``side`` says where a bool crosses a delegate boundary.

    input: a bool enters the delegate (a bool program input ``m``, or a comparison pinned to the
    CPU) and ``where`` consumes it; output: the bool is the program's output; both: a bool program
    input is combined inside the delegate and the bool result is the output."""

    def __init__(self, kind: str, side: str):
        super().__init__()
        self.kind, self.side = kind, side

    def _bool(self, x, y, m):
        if self.kind in COMPARISONS:
            b = COMPARISONS[self.kind][0](x, y)
            return b if m is None else torch.logical_and(m, b)
        return LOGICAL[self.kind](m if m is not None else x > y, x < y)

    def forward(self, x, y, m):
        if self.side == "output":
            return self._bool(x, y, None)
        b = self._bool(x, y, m)
        if self.side == "both":
            return b
        return torch.where(b, x, y)


def _inputs(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    y = torch.randn(shape, generator=g)
    y = torch.where(torch.rand(shape, generator=g) < 0.3, x, y)  # equal elements for eq/le/ge
    m = torch.rand(shape, generator=g) < 0.5
    return x, y, m


def _crossing_dtypes(edge):
    """The dtypes of every tensor entering or leaving a delegate of the lowered program."""
    ins, outs = set(), set()
    graph = edge.exported_program().graph_module.graph
    for n in graph.nodes:
        if not is_call_delegate(n):
            continue
        ins |= {a.meta["val"].dtype for a in n.args[1:] if hasattr(a, "meta")}
        vals = n.meta["val"]
        outs |= {v.dtype for v in (vals if isinstance(vals, (list, tuple)) else [vals])}
    return ins, outs


def _lower_and_run(kind, side, shape, seed, target):
    model = BoolAtBoundary(kind, side).eval()
    x, y, m = _inputs(shape, seed)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(model, (x, y, m), spec)
    pin = [COMPARISONS[kind][1]] if side == "input" and kind in COMPARISONS else []
    edge, part = lower(q, (x, y, m), spec, cpu_ops=pin)
    pte = edge.to_executorch().buffer
    got = run_pte(pte, [x, y, m])
    return q(x, y, m), got[0], edge, part


CASES = dict(
    kind=st.sampled_from(KINDS),
    side=st.sampled_from(SIDES),
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple),
    seed=st.integers(0, 2**16),
    target=st.sampled_from(U85_TARGETS),
)
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _check_u85(kind, side, shape, seed, target):
    want, got, edge, part = _lower_and_run(kind, side, shape, seed, target)
    ins, outs = _crossing_dtypes(edge)
    if side in ("input", "both"):
        assert torch.bool in ins, (ins, part.report.cpu_reasons)
    if side in ("output", "both"):
        assert torch.bool in outs, (outs, part.report.cpu_reasons)
    assert not any("torch.bool" in r for r in part.report.cpu_reasons.values()), (
        part.report.cpu_reasons
    )
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} elements differ"


@settings(max_examples=6, **SETTINGS)
@given(**CASES)
def test_bool_crosses_u85_boundaries_exactly(kind, side, shape, seed, target):
    _check_u85(kind, side, shape, seed, target)


@pytest.mark.slow
@settings(max_examples=80, **SETTINGS)
@given(**CASES)
def test_bool_crosses_u85_boundaries_many(kind, side, shape, seed, target):
    _check_u85(kind, side, shape, seed, target)


@settings(max_examples=3, **SETTINGS)
@given(
    kind=st.sampled_from(KINDS),
    side=st.sampled_from(SIDES),
    target=st.sampled_from(["ethos-u55-128", "ethos-u65-256"]),
)
def test_bool_stays_on_the_cpu_where_the_target_has_no_bool(kind, side, target):
    want, got, edge, part = _lower_and_run(kind, side, (2, 5), 0, target)
    ins, outs = _crossing_dtypes(edge)
    assert torch.bool not in ins | outs
    assert torch.equal(got, want)
