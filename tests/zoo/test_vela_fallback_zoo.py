# SPDX-License-Identifier: BSD-3-Clause
"""Issue #8 on real models: timm mobilevit_s and swin_tiny for ethos-u55-128, where Vela 5.1.0
segfaults (upstream 1.5.1's in-process Vela kills the interpreter).

Normally nothing reaches Vela that crashes it: passes/slice_on_merged_axis.py rewrites the rank-5
slices, and TargetLimits keeps what still would crash on the CPU. Here both are switched off, so
real Vela crashes and the partitioner's culprit search has to find the ops and fall back. The
export must survive with zero float boundary tensors, list every op moved because of Vela (with
Vela's words), every delegate must be within 1 LSB of the quantized graph evaluated in float64
(op_numerics; the float32 eager model is too noisy a referee on deep partitions, see
op_numerics' docstring), and the .pte must carry exactly the lowered delegates.
"""

import time

import pytest
import torch
from _pte import assert_pte_carries, lowered_delegates
from _tools import require_tool

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng import partitioner as partitioner_module
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.op_numerics import check_ops
from ethosu_ng.partitioning.boundary import float_boundary_tensors
from ethosu_ng.partitioning.target_limits import TargetLimits

timm = require_tool("timm", module=True, install="pip install -e .[zoo]")


@pytest.mark.slow
@pytest.mark.parametrize("name,size", [("mobilevit_s", 256), ("swin_tiny_patch4_window7_224", 224)])
def test_real_vela_crash_falls_back_to_cpu(monkeypatch, name, size):
    monkeypatch.setattr(TargetLimits, "why_not", lambda self, node: None)
    monkeypatch.setattr(
        partitioner_module,
        "PRE_PARTITION_PASSES",
        tuple(
            p
            for p in partitioner_module.PRE_PARTITION_PASSES
            if p.__name__ != "SliceOnMergedAxisPass"
        ),
    )
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    x = (torch.randn(1, 3, size, size),)
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    q = quantize(model, x, spec, calibration=[x, (torch.randn(1, 3, size, size),)])
    t0 = time.time()
    with pytest.warns(UserWarning, match="NPU compiler failed"):
        edge, part = lower(q, x, spec)
    lowering_s = time.time() - t0
    report = part.report
    moved = {n: report.cpu_targets[n] for n in report.compiler_fallback}
    print(
        f"\n{name}: lowered in {lowering_s:.0f} s, {len(report.partitions)} partitions, "
        f"{report.fallback_compiles} candidate compiles; moved to CPU because Vela failed: {moved}"
    )
    print("Vela said:", next(iter(report.compiler_fallback.values())))
    assert moved
    assert all("Vela crashed" in why for why in report.compiler_fallback.values())
    assert float_boundary_tensors(edge.exported_program()) == []
    lowering = check_ops(edge, x)
    assert len(lowering) == len(report.partitions)
    worst = {r.name: r.lowering_worst for r in lowering}
    print("TOSA vs float64 evaluation, worst per delegate:", max(worst.values()))
    assert all(v <= 1 for v in worst.values()), {k: v for k, v in worst.items() if v > 1}
    assert_pte_carries(lowered_delegates(edge), edge.to_executorch().buffer)
