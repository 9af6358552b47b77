"""torch.roll (static shifts) runs on the NPU as slice + cat instead of CPU index arithmetic."""

import pytest
import torch
import torch.nn as nn

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


class ShiftedWindowAttention(nn.Module):
    """Swin's shifted-window block in miniature: roll, window partition, attention, reverse."""

    def __init__(self, dim=16, window=4, shift=2, heads=2):
        super().__init__()
        self.window, self.shift, self.heads = window, shift, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):  # (B, H, W, C)
        b, h, w, c = x.shape
        ws, nh = self.window, self.heads
        y = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = y.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        qkv = self.qkv(y).reshape(y.shape[0], ws * ws, 3, nh, c // nh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q * (c // nh) ** -0.5) @ k.transpose(-2, -1)
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(-1, ws * ws, c)
        y = (
            self.proj(y)
            .view(b, h // ws, w // ws, ws, ws, c)
            .permute(0, 1, 3, 2, 4, 5)
            .reshape(b, h, w, c)
        )
        return x + torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))


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
    """Without SliceOnMergedAxisPass and the U55 limit, Vela 5.1.0 segfaults on this block
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
