# SPDX-License-Identifier: BSD-3-Clause
"""torch.roll (static shifts) runs on the NPU as slice + cat instead of CPU index arithmetic."""

import pytest
import torch
import torch.nn as nn
from models import ShiftedWindowAttention

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates
from ethosu_ng.partitioning.boundary import float_boundary_tensors
from ethosu_ng.vela.compiler import VelaError


class RollOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.c(torch.roll(self.c(x), shifts=(-3, 2), dims=(2, 3)))


CASES = {
    "roll_only": (RollOnly, (1, 4, 7, 7)),
    "shifted_window": (ShiftedWindowAttention, (1, 8, 8, 16)),
}


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_roll_is_delegated(case, target):
    cls, shape = CASES[case]
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(shape, generator=g),) for _ in range(3)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(cls().eval(), data[0], spec, calibration=data)
    assert any("roll" in str(n.target) for n in q.graph.nodes)
    edge, part = lower(q, data[0], spec)
    compute_on_cpu = {t for t in part.report.cpu_targets.values() if "quantize" not in t}
    # U55 too: SliceOnMergedAxisPass slices q/k/v out of a rank-2 view of the rank-5 permute.
    assert len(part.report.partitions) == 1
    assert compute_on_cpu == set(), part.report.cpu_reasons
    assert float_boundary_tensors(edge.exported_program()) == []
    for x in data[1:]:
        assert max(r.worst for r in check_delegates(edge, x)) <= 1


def test_vela_crash_is_a_clean_error_naming_partition_and_target(monkeypatch):
    """Without SliceOnMergedAxisPass and the U55 limit, Vela 5.1.0 and 5.2.0 segfault on this block
    (rank-5 SLICE -> RESHAPE -> MUL); the export survives it (with CPU fallback off; with it on,
    tests/test_vela_fallback.py moves the culprit to the CPU)."""
    from ethosu_ng.partitioning.target_limits import TargetLimits
    from ethosu_ng.passes import SliceOnMergedAxisPass

    monkeypatch.setattr(TargetLimits, "why_not", lambda self, node: None)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn((1, 8, 8, 16), generator=g),) for _ in range(2)]
    spec = EthosUNGCompileSpec("ethos-u55-128", cpu_fallback=False)
    q = quantize(ShiftedWindowAttention().eval(), data[0], spec, calibration=data)
    with pytest.raises(VelaError, match=r"crashed \(SIGSEGV\).*ethosu_ng_0.*ethos-u55-128"):
        lower(q, data[0], spec, disabled_passes=[SliceOnMergedAxisPass])
