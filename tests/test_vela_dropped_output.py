# SPDX-License-Identifier: BSD-3-Clause
"""A partition output that is also consumed inside the partition (a residual branch leaving the
NPU). Upstream's layout pass routes the internal consumer through the output's NCHW transpose and
back; Vela 5.1.0 cancels that pair and drops the graph output (TOSA 2 outputs, Vela 1). Preprocess
detects the count mismatch and emits the output channels-last; the blob records dim order
(0, 2, 3, 1) and the numbers still match."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "data"))
from tiny_factory import make  # noqa: E402

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec  # noqa: E402
from ethosu_ng.export import lower, quantize  # noqa: E402
from ethosu_ng.numerics.tosa_reference import check_delegates  # noqa: E402
from ethosu_ng.partitioning.boundary import float_boundary_tensors  # noqa: E402


# With the TOSA rewrites off, Vela drops the output and the channels-last retry must recover it;
# with them on (the default) the graph Vela gets no longer triggers the drop, and the output
# must be there all the same.
@pytest.mark.parametrize("tosa_optimize", [False, True], ids=["rewrites-off", "rewrites-on"])
@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_output_with_internal_consumer_survives_vela(target, tosa_optimize):
    torch.manual_seed(0)
    model, x = make()
    spec = EthosUNGCompileSpec(target, embed_tosa=True, tosa_optimize=tosa_optimize)
    q = quantize(model, x, spec, calibration=[x, (torch.randn(1, 3, 16, 16),)])
    edge, part = lower(q, x, spec, cpu_ops=["aten.add.Tensor"])
    program = edge.exported_program()
    assert float_boundary_tensors(program) == []
    blob = DelegateBlob.from_bytes(program.graph_module.lowered_module_0.processed_bytes)
    assert len(blob.outputs) == 2
    orders = sorted(s.dim_order for s in blob.outputs)
    if not tosa_optimize:
        assert (0, 2, 3, 1) in orders, orders
    for inputs in (x, (torch.randn(1, 3, 16, 16),)):
        assert max(r.worst for r in check_delegates(edge, inputs)) <= 1
    edge.to_executorch()
