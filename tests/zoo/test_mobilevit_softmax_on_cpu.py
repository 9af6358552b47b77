"""Seed 000 at model level: timm mobilevit_s for ethos-u85-256 with softmax (the ops it
decomposes to) pinned to the CPU. Many partitions, zero float tensors across any boundary, and
every delegate's TOSA graph against the eager quantized model on the same boundary inputs.

Tolerance: each op in TOSA rounds in integers where the eager model rounds float32 results; a
1-LSB difference early in a deep partition is amplified by later convs. Measured (seed 0): 59 of
61 delegates within 1 LSB; the 18-conv stem partition has 1086 of 147456 output elements off by
more than 1 (max 8), one attention partition one element off by 2. We require every delegate's
max <= 8 LSB and >= 99 % of every output's elements within 1 LSB."""

import time

import pytest
import torch

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng.boundary import float_boundary_tensors
from ethosu_ng.export import lower, quantize
from ethosu_ng.tosa_reference import check_delegates

timm = pytest.importorskip("timm")

SOFTMAX_OPS = ["aten.exp.default", "aten.amax.default", "aten.sum.dim_IntList",
               "aten.reciprocal.default", "aten._softmax.default"]


@pytest.mark.slow
def test_mobilevit_s_split_at_every_softmax():
    t0 = time.time()
    torch.manual_seed(0)
    model = timm.create_model("mobilevit_s", pretrained=False).eval()
    x = (torch.randn(1, 3, 256, 256),)
    spec = EthosUNGCompileSpec("ethos-u85-256", embed_tosa=True)
    q = quantize(model, x, spec, calibration=[x, (torch.randn(1, 3, 256, 256),)])
    edge, part = lower(q, x, spec, cpu_ops=SOFTMAX_OPS)
    program = edge.exported_program()
    print(f"lowered in {time.time() - t0:.0f} s: {len(part.report.partitions)} partitions")
    assert len(part.report.partitions) > 3
    assert float_boundary_tensors(program) == []
    cpu_ops = {t for t in part.report.cpu_targets.values() if "quantize" not in t}
    assert cpu_ops <= set(SOFTMAX_OPS) | {"aten.mul.Tensor", "aten.sub.Tensor"}, cpu_ops
    gm = program.graph_module
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.higher_order.executorch_call_delegate:
            blob = DelegateBlob.from_bytes(getattr(gm, n.args[0].target).processed_bytes)
            assert [v.dtype for v in n.meta["val"]] == [s.dtype for s in blob.outputs]
    results = check_delegates(edge, x)
    assert len(results) == len(part.report.partitions)
    for r in results:
        assert r.worst <= 8, (r.name, r.max_lsb)
        for a, b in zip(r.outputs_tosa, r.outputs_ref):
            within = ((a.int() - b.int()).abs() <= 1).float().mean().item()
            assert within >= 0.99, (r.name, within)
    exact = sum(r.worst <= 1 for r in results)
    print(f"{exact}/{len(results)} delegates within 1 LSB")
    assert exact >= len(results) - 3
    edge.to_executorch()
