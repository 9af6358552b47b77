"""Seed 000 at model level: timm mobilevit_s for ethos-u85-256 with softmax (the ops it
decomposes to) pinned to the CPU. Many partitions, zero float tensors across any boundary,
every delegate within 1 LSB of the eager quantized model on the TOSA reference model."""

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
    worst = {r.name: r.worst for r in results}
    assert all(v <= 1 for v in worst.values()), worst
    edge.to_executorch()
