# SPDX-License-Identifier: BSD-3-Clause
"""A while_loop, which ExecuTorch cannot run on the CPU and ethosu_ng does not delegate, fails the
export when partitioning starts with a one-line error naming the node, on every target and
wherever the loop sits (top level or inside a cond branch); a cond still exports and runs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torch._higher_order_ops.while_loop import while_loop

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.partitioning.control_flow import (
    UnsupportedControlFlowError,
    reject_cpu_unrunnable_control_flow,
)
from ethosu_ng.runtime import run_pte

TARGETS = ["ethos-u55-128", "ethos-u65-256", "ethos-u85-128", "ethos-u85-512"]


def _loop(x, limit):
    def cond_fn(v):
        return torch.gt(v.abs().sum(), torch.full((1,), float(limit))).squeeze()

    def body_fn(v):
        return (torch.div(v, torch.full((1,), 2.0)),)

    return while_loop(cond_fn, body_fn, (x,))[0]


class TopLevelLoop(torch.nn.Module):
    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def forward(self, x):
        return _loop(torch.relu(x), self.limit) * 2


class LoopInCond(torch.nn.Module):
    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def forward(self, x):
        return torch.cond(
            x.sum() > 0, lambda v: _loop(v, self.limit), lambda v: v - 1, (torch.relu(x),)
        )


SETTINGS = dict(
    deadline=None,
    derandomize=True,
    phases=[Phase.generate],  # a failure is reported as found: shrinking re-exports for minutes
    suppress_health_check=[HealthCheck.too_slow],
)
LOOPS = dict(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
    limit=st.integers(1, 4),
    target=st.sampled_from(TARGETS),
)


@settings(max_examples=2, **SETTINGS)
@given(**LOOPS)
def test_while_loop_fails_at_partition_time_naming_the_node(shape, limit, target):
    _check_refused(shape, limit, target)


@pytest.mark.slow
@settings(max_examples=16, **SETTINGS)
@given(**LOOPS)
def test_while_loop_fails_at_partition_time_many(shape, limit, target):
    _check_refused(shape, limit, target)


def _check_refused(shape, limit, target):
    model = TopLevelLoop(limit).eval()
    x = (torch.randn(shape),)
    spec = EthosUNGCompileSpec(target)
    with pytest.raises(UnsupportedControlFlowError) as e:
        lower(quantize(model, x, spec), x, spec)
    msg = str(e.value)
    assert "\n" not in msg
    assert "while_loop" in msg and target in msg and "node " in msg, msg


def test_a_while_loop_inside_a_cond_branch_is_found():
    """(Quantizing nested control flow fails in the PT2E quantizer, so the check is called on the
    exported float program.)"""
    program = torch.export.export(LoopInCond(2).eval(), (torch.randn(2, 3),))
    with pytest.raises(UnsupportedControlFlowError, match=r"node true_graph_0\.while_loop"):
        reject_cpu_unrunnable_control_flow(program, "ethos-u85-128")


class CondOnly(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (torch.relu(x),))


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-128"])
def test_cond_still_exports_and_runs(target):
    x = (torch.randn(2, 3),)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(CondOnly().eval(), x, spec)
    edge, _ = lower(q, x, spec)
    got = run_pte(edge.to_executorch().buffer, list(x))[0]
    torch.testing.assert_close(got, q(*x), atol=0, rtol=0)
