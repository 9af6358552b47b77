# SPDX-License-Identifier: BSD-3-Clause
"""An op kept on the CPU by ``cpu_ops`` is reported with the op it was pinned as, whichever way
the user named it (an op overload or its dotted name)."""

import pytest
import torch
from conftest import calibration_batches
from models import ConvSplitBmm

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize


@pytest.mark.parametrize("named", ["aten.bmm.default", torch.ops.aten.bmm.default])
def test_a_pinned_op_is_reported_with_the_op_it_was_pinned_as(named):
    x = ConvSplitBmm.example()
    spec = EthosUNGCompileSpec("ethos-u85-256", verify_npu=False)
    q = quantize(ConvSplitBmm().eval(), x, spec, calibration=calibration_batches(x))
    edge, part = lower(q, x, spec, cpu_ops=[named])
    bmm = [
        n.name
        for n in edge.exported_program().graph.nodes
        if n.op == "call_function" and "aten.bmm" in str(n.target)
    ]
    assert bmm, "bmm should stay on the CPU"
    reasons = {part.report.cpu_reasons.get(name) for name in bmm}
    assert reasons == {"pinned to CPU by cpu_ops (aten.bmm.default)"}, reasons
