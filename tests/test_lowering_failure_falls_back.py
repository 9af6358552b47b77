# SPDX-License-Identifier: BSD-3-Clause
"""Export never fails because of us: an exception while lowering one partition (our passes,
upstream's TOSA lowering, the IO cross-check) keeps the ops responsible on the CPU with the
reason in the report, as a Vela crash does; the program still exports and runs.

Property: for every op kind of a small CNN-with-head, a lowering that raises whenever a partition
holds that kind leaves that kind on the CPU (with at most what the boundary contract fuses it
with), the rest delegated, and the program runs bit-exact on the host (TOSA reference and NPU
model agree).
"""

from __future__ import annotations

import pytest
import torch
from _pte import CrossCheckedMethod
from torch import nn

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.adapters import arm as upstream
from ethosu_ng.export import lower, quantize
from ethosu_ng.ops import op_name


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = y + self.dw(y)
        y = self.pool(y)
        return torch.sigmoid(self.fc(y.flatten(1)))


# Op kinds of Net's edge program the planted failure targets (each a compute op on the NPU).
KINDS = [
    "aten.convolution.default",
    "aten.relu.default",
    "aten.add.Tensor",
    "aten.avg_pool2d.default",
    "aten.linear.default",
    "aten.sigmoid.default",
]


def _kinds_in(program) -> set:
    return {op_name(n.target) for n in program.graph_module.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_lowering_that_raises_on_one_op_kind_leaves_it_on_the_cpu(kind, monkeypatch):
    real = upstream.lower_to_tosa

    def planted(program, spec, op_sources):
        if kind in _kinds_in(program):
            raise RuntimeError(f"InternalError: planted failure lowering {kind}")
        return real(program, spec, op_sources)

    monkeypatch.setattr(upstream, "lower_to_tosa", planted)
    torch.manual_seed(0)
    x = (torch.randn(1, 3, 8, 8),)
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    q = quantize(Net().eval(), x, spec, calibration=[x])
    edge, part = lower(q, x, spec)
    moved = part.report.compiler_fallback
    assert moved, "nothing moved to the CPU"
    for why in moved.values():
        assert why.startswith("lowering raised RuntimeError") and "planted failure" in why
    # The kind itself is on the CPU (with what it is fused with under the boundary contract:
    # conv + relu share one quantized output); the rest of the network stays on the NPU.
    cpu = part.report.cpu_targets
    assert kind in cpu.values(), cpu
    graph = edge.exported_program().graph_module.graph
    on_cpu = {op_name(n.target) for n in graph.nodes if n.op == "call_function"}
    assert kind in on_cpu
    still_delegated = set(KINDS) - set(cpu.values())
    assert len(still_delegated) >= len(KINDS) - 3, (kind, cpu)
    pte = edge.to_executorch().buffer
    CrossCheckedMethod(pte, "ethos-u55-128").execute(list(x))


def test_without_cpu_fallback_the_lowering_error_names_the_partition(monkeypatch):
    def planted(program, spec, op_sources):
        raise RuntimeError("planted")

    monkeypatch.setattr(upstream, "lower_to_tosa", planted)
    x = (torch.randn(1, 3, 8, 8),)
    spec = EthosUNGCompileSpec("ethos-u55-128", cpu_fallback=False)
    q = quantize(Net().eval(), x, spec, calibration=[x])
    with pytest.raises(RuntimeError, match=r"lowering partition 'ethosu_ng_0' .* RuntimeError"):
        lower(q, x, spec)


def test_the_reason_leads_with_the_innermost_cause():
    """Upstream's pass manager re-raises an op's error inside one that lists every pass run so
    far; the reason a user reads (cut at 400 characters) starts with the error naming the op."""
    from ethosu_ng.compiler.pipeline import LoweringError

    try:
        try:
            raise ValueError("Unsupported input dtype torch.float32 (TOSA op: AVG_POOL2D)")
        except ValueError as inner:
            raise Exception(
                "An error occurred when running a pass after " + "'Pass', " * 200
            ) from inner
    except Exception as e:
        err = LoweringError.of("p0", "ethos-u55-128", e)
    assert err.what == "lowering raised Exception", err.what
    assert err.last_words.startswith("ValueError: Unsupported input dtype"), err.last_words
    assert "AVG_POOL2D" in str(err)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_every_op_kept_whole_can_reach_a_cpu_kernel(target):
    """An op the partitioner keeps whole for the NPU may still end on the CPU (a lowering or a
    verified-compile failure moves it). Then it needs an out variant (a portable kernel), or a
    core ATen decomposition for ``export.lower`` to lower it again with (``decomposed_ops``), or
    our own CPU form (``WITHOUT_CPU_KERNEL``): over every op upstream keeps (aten.pad and
    aten.selu have no out variant)."""
    from executorch.exir.dialects._ops import ops as exir_ops

    from ethosu_ng.adapters import exir
    from ethosu_ng.passes import non_core_aten_ops

    ep = torch.export.export(nn.ReLU(), (torch.randn(2),))
    kept, _ = upstream.ops_to_not_decompose(EthosUNGCompileSpec(target), ep)
    table = exir.decomposition_table()
    stranded = []
    for op in kept:
        packet = getattr(exir_ops.edge.aten, op.__name__.split(".")[0])
        edge = getattr(packet, op._overloadname)
        if not exir.has_out_variant(edge):
            stranded.append(op_name(op))
            assert op in table or op_name(op) in non_core_aten_ops.WITHOUT_CPU_KERNEL, op
    assert "aten.pad.default" in stranded, stranded  # the check sees a missing out variant
