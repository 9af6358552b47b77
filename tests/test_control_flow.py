# SPDX-License-Identifier: BSD-3-Clause
"""Control flow. On an Ethos-U85 (TOSA ``+cf``) a ``while_loop`` whose graphs the NPU takes is
delegated whole, checked at compile time against the quantized model like any partition, and
runs on the host equal to the eager quantized model. Where it is not delegated (Ethos-U55/U65,
or a loop the verified compile refuses), ExecuTorch's CPU cannot run it: the export fails with
a one-line error naming the node and why, wherever the loop sits (top level or inside a cond
branch). A cond still exports and runs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torch._higher_order_ops.while_loop import while_loop

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.ops import CALL_DELEGATE
from ethosu_ng.partitioning.control_flow import UnsupportedControlFlowError, reject_cpu_unrunnable
from ethosu_ng.runtime import run_pte

U85 = ["ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048"]
NO_CF = ["ethos-u55-128", "ethos-u65-256"]


def _loop(x, limit):
    def cond_fn(v):
        return torch.gt(v.sum(), torch.full((1,), float(limit))).squeeze()

    def body_fn(v):
        return (torch.div(v, torch.full((1,), 2.0)),)

    return while_loop(cond_fn, body_fn, (x,))[0]


class TopLevelLoop(torch.nn.Module):
    """Halves its input until the sum is at most ``limit``: as many iterations as the input
    needs, none for a negative sum."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def forward(self, x):
        return _loop(x, self.limit)


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
SHAPES = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)
LIMITS = st.integers(1, 4)


def _delegates(edge) -> int:
    gm = edge.exported_program().graph_module
    return sum(n.op == "call_function" and n.target is CALL_DELEGATE for n in gm.graph.nodes)


def _lsb_apart(q, got, want) -> float:
    """Steps of ``q``'s output grid (its output's dequantize) between two readings of it."""
    (returned,) = q.graph.output_node().args[0]
    step = returned.args[1]
    return (torch.round(got.double() / step) - torch.round(want.double() / step)).abs().max().item()


def _check_delegated(shape, limit, target, seed):
    """The loop is delegated whole (no while_loop left on the CPU) and the program is within 1 LSB
    of the eager quantized model on inputs that run the loop a different number of times."""
    g = torch.Generator().manual_seed(seed)
    calibration = [(torch.randn(shape, generator=g) * 4,) for _ in range(3)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(TopLevelLoop(limit).eval(), calibration[0], spec, calibration=calibration)
    edge, partitioner = lower(q, calibration[0], spec)
    assert _delegates(edge) == 1, partitioner.report.cpu_reasons
    assert "while_loop" not in partitioner.report.cpu_targets.values()
    pte = edge.to_executorch().buffer
    for scale in (0.5, 2.0, 4.0):
        x = (torch.randn(shape, generator=g) * scale,)
        # Halving an odd code is a rounding tie (README: within 1 LSB); halving shrinks it again.
        assert _lsb_apart(q, run_pte(pte, list(x))[0], q(*x)) <= 1, x


@settings(max_examples=2, **SETTINGS)
@given(shape=SHAPES, limit=LIMITS, target=st.sampled_from(U85), seed=st.integers(0, 99))
def test_while_loop_is_delegated_on_u85_and_equals_the_quantized_model(shape, limit, target, seed):
    _check_delegated(shape, limit, target, seed)


@pytest.mark.slow
@settings(max_examples=12, **SETTINGS)
@given(shape=SHAPES, limit=LIMITS, target=st.sampled_from(U85), seed=st.integers(0, 99))
def test_while_loop_is_delegated_on_u85_many(shape, limit, target, seed):
    _check_delegated(shape, limit, target, seed)


class LoopWithAdditionalInput(torch.nn.Module):
    """Doubles its input until the sum reaches a limit passed as the loop's additional input: a
    buffer (``source="buffer"``) or a tensor computed from the input (``"computed"``), read by
    the condition alone or by the body too."""

    def __init__(self, source: str, threshold: float, body_reads: bool):
        super().__init__()
        self.source, self.body_reads = source, body_reads
        self.register_buffer("threshold", torch.tensor((threshold,)))

    def forward(self, x):
        # At least one step of the grid the value shares with the limit (a loop carries one
        # grid), so that doubling it reaches any limit.
        x = torch.abs(x) + 1.0
        limit = self.threshold if self.source == "buffer" else x.sum().reshape(1) * self.threshold

        def cond_fn(v, lim):
            return torch.lt(v.sum(), lim).squeeze()

        def body_fn(v, lim):
            return (v + v + lim * 0.0625,) if self.body_reads else (v + v,)

        return torch.ops.higher_order.while_loop(cond_fn, body_fn, (x,), (limit,))[0]


ADDITIONAL = dict(
    shape=SHAPES,
    source=st.sampled_from(["buffer", "computed"]),
    threshold=st.sampled_from([4.0, 30.0, 128.0, 400.0]),
    body_reads=st.booleans(),
    target=st.sampled_from(U85),
    seed=st.integers(0, 99),
)


def _check_additional_input(shape, source, threshold, body_reads, target, seed):
    """A loop with an additional input is delegated whole and within 1 LSB of the eager quantized
    model on inputs that double a different number of times (upstream's annotation of such a loop
    put its result on another grid than its entry, and the TOSA graph stopped it early)."""
    if source == "computed":
        threshold = threshold / 16  # a multiple of the input's own sum
    g = torch.Generator().manual_seed(seed)
    calibration = [(torch.rand(shape, generator=g) * 2,) for _ in range(3)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    model = LoopWithAdditionalInput(source, threshold, body_reads).eval()
    q = quantize(model, calibration[0], spec, calibration=calibration)
    edge, partitioner = lower(q, calibration[0], spec)
    assert _delegates(edge) == 1, partitioner.report.cpu_reasons
    assert "while_loop" not in partitioner.report.cpu_targets.values()
    pte = edge.to_executorch().buffer
    for scale in (0.1, 0.5, 2.0):
        x = (torch.rand(shape, generator=g) * scale,)
        assert _lsb_apart(q, run_pte(pte, list(x))[0], q(*x)) <= 1, x


@settings(max_examples=1, **SETTINGS)
@given(**ADDITIONAL)
def test_while_loop_with_an_additional_input_equals_the_quantized_model(
    shape, source, threshold, body_reads, target, seed
):
    _check_additional_input(shape, source, threshold, body_reads, target, seed)


@pytest.mark.slow
@settings(max_examples=10, **SETTINGS)
@given(**ADDITIONAL)
def test_while_loop_with_an_additional_input_many(
    shape, source, threshold, body_reads, target, seed
):
    _check_additional_input(shape, source, threshold, body_reads, target, seed)


def _check_refused(shape, limit, target):
    model = TopLevelLoop(limit).eval()
    x = (torch.randn(shape),)
    spec = EthosUNGCompileSpec(target)
    with pytest.raises(UnsupportedControlFlowError) as e:
        lower(quantize(model, x, spec), x, spec)
    msg = str(e.value)
    assert "\n" not in msg
    assert "while_loop" in msg and target in msg and "node " in msg, msg
    assert "control flow extension" in msg, msg  # why: the target's TOSA profile


@settings(max_examples=1, **SETTINGS)
@given(shape=SHAPES, limit=LIMITS, target=st.sampled_from(NO_CF))
def test_while_loop_without_control_flow_fails_at_partition_time_naming_the_node(
    shape, limit, target
):
    _check_refused(shape, limit, target)


@pytest.mark.slow
@settings(max_examples=8, **SETTINGS)
@given(shape=SHAPES, limit=LIMITS, target=st.sampled_from(NO_CF))
def test_while_loop_without_control_flow_fails_at_partition_time_many(shape, limit, target):
    _check_refused(shape, limit, target)


class LoopWithAtan2(torch.nn.Module):
    def forward(self, x):
        def cond_fn(v):
            return torch.gt(v.sum(), torch.full((1,), 1.0)).squeeze()

        def body_fn(v):
            return (torch.atan2(v, v + 3) / 2,)

        return while_loop(cond_fn, body_fn, (x,))[0]


def test_a_loop_whose_body_the_npu_does_not_take_names_the_op():
    """On a U85 the loop is refused because of one op in its body: the error names that op."""
    x = (torch.rand(2, 3) * 4,)
    spec = EthosUNGCompileSpec("ethos-u85-128")
    with pytest.raises(UnsupportedControlFlowError) as e:
        lower(quantize(LoopWithAtan2().eval(), x, spec), x, spec)
    assert "aten.atan2.default in the graph it calls is not supported" in str(e.value), e.value


def test_a_while_loop_inside_a_cond_branch_on_the_cpu_is_found():
    """(Checked on the exported float program: nothing is tagged, so the cond runs on the CPU.)"""
    program = torch.export.export(LoopInCond(2).eval(), (torch.randn(2, 3),))
    with pytest.raises(UnsupportedControlFlowError, match=r"node true_graph_0\.while_loop"):
        reject_cpu_unrunnable(program, "ethos-u85-128", {})


class CondOnly(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (torch.relu(x),))


class CondConv(torch.nn.Module):
    """A cond whose branches compute: a convolution on one side, a sigmoid on the other."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return torch.cond(
            x.mean() > 0, lambda v: self.conv(v), lambda v: torch.sigmoid(v) * 2, (x + 1,)
        )


def _check_cond_delegated(channels, size, target, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = CondConv(channels).eval()
    shape = (1, channels, size, size)
    # Both branches calibrated: one batch per sign of the mean.
    calibration = [(torch.randn(shape, generator=g) + m,) for m in (2.0, -3.0)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(model, calibration[0], spec, calibration=calibration)
    edge, partitioner = lower(q, calibration[0], spec)
    assert _delegates(edge) == 1, partitioner.report.cpu_reasons
    assert "cond" not in partitioner.report.cpu_targets.values(), partitioner.report.cpu_reasons
    pte = edge.to_executorch().buffer
    for m in (2.0, -3.0):
        x = (torch.randn(shape, generator=g) + m,)
        assert _lsb_apart(q, run_pte(pte, list(x))[0], q(*x)) <= 1, m


CONDS = dict(
    channels=st.integers(1, 8),
    size=st.integers(2, 9),
    target=st.sampled_from(U85),
    seed=st.integers(0, 99),
)


@settings(max_examples=1, **SETTINGS)
@given(**CONDS)
def test_cond_is_delegated_whole_on_u85_both_branches_within_1_lsb(channels, size, target, seed):
    _check_cond_delegated(channels, size, target, seed)


@pytest.mark.slow
@settings(max_examples=10, **SETTINGS)
@given(**CONDS)
def test_cond_is_delegated_whole_on_u85_many(channels, size, target, seed):
    _check_cond_delegated(channels, size, target, seed)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-128"])
def test_cond_still_exports_and_runs(target):
    x = (torch.randn(2, 3),)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(CondOnly().eval(), x, spec)
    edge, _ = lower(q, x, spec)
    got = run_pte(edge.to_executorch().buffer, list(x))[0]
    torch.testing.assert_close(got, q(*x), atol=0, rtol=0)


class NestedConds(torch.nn.Module):
    """A cond in a cond branch, with constant operands at both depths (``x * c``, ``y + c``),
    which quantizing folds into tensor attributes of the branch graphs; the inner branch is a
    convolution or a constant add."""

    def __init__(self, channels: int, constants, inner_conv: bool):
        super().__init__()
        self.c1, self.c2, self.c3 = constants
        self.inner_conv = inner_conv
        self.conv = torch.nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        def inner_true(v):
            return self.conv(v) if self.inner_conv else v + self.c2

        def inner_false(v):
            return v - self.c2

        def outer_true(v):
            y = v * self.c1
            return torch.cond(y.mean() > 0.5, inner_true, inner_false, (y,))

        def outer_false(v):
            return v * self.c3

        return torch.cond(x.sum() > 0, outer_true, outer_false, (x,))


NESTED = dict(
    channels=st.integers(1, 4),
    size=st.integers(2, 6),
    constants=st.tuples(*[st.sampled_from([0.5, 1.0, 1.5, 3.0]) for _ in range(3)]),
    inner_conv=st.booleans(),
    target=st.sampled_from(U85 + NO_CF),
    seed=st.integers(0, 99),
)


def _check_nested(channels, size, constants, inner_conv, target, seed):
    """Exports on every target (the conds delegated whole on a U85, on the CPU elsewhere) and is
    within 1 LSB of the eager quantized model on inputs that take each of the three paths."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    shape = (1, channels, size, size)
    # One batch per path: outer false, outer true with the inner mean below and above 0.5.
    means = (-2.0, 0.1 / constants[0], 2.0 / constants[0])
    calibration = [(torch.randn(shape, generator=g) * 0.1 + m,) for m in means]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(
        NestedConds(channels, constants, inner_conv).eval(),
        calibration[0],
        spec,
        calibration=calibration,
    )
    edge, partitioner = lower(q, calibration[0], spec)
    if target in U85:
        assert _delegates(edge) == 1, partitioner.report.cpu_reasons
        assert "cond" not in partitioner.report.cpu_targets.values(), partitioner.report.cpu_reasons
    pte = edge.to_executorch().buffer
    for m in means:
        x = (torch.randn(shape, generator=g) * 0.1 + m,)
        assert _lsb_apart(q, run_pte(pte, list(x))[0], q(*x)) <= 1, m


@settings(max_examples=1, **SETTINGS)
@given(**NESTED)
def test_nested_cond_with_constants_exports_and_equals_the_quantized_model(
    channels, size, constants, inner_conv, target, seed
):
    _check_nested(channels, size, constants, inner_conv, target, seed)


@pytest.mark.slow
@settings(max_examples=10, **SETTINGS)
@given(**NESTED)
def test_nested_cond_with_constants_many(channels, size, constants, inner_conv, target, seed):
    _check_nested(channels, size, constants, inner_conv, target, seed)
