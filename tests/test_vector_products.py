# SPDX-License-Identifier: BSD-3-Clause
"""``torch.dot`` and ``torch.mv`` (1-D matrix products, which upstream 1.5.1 does not delegate)
are delegated whole, their lowering and stream verified at compile time, on U55 and U85."""

import pytest
import torch
from _pte import delegate_infos

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize


class Dot(torch.nn.Module):
    def forward(self, a, b):
        return torch.dot(a, b).reshape(1)


class Mv(torch.nn.Module):
    def forward(self, m, v):
        return torch.mv(m, v)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("kind", ["dot", "mv"])
def test_a_vector_product_is_delegated_whole_and_verified(kind, target):
    torch.manual_seed(0)
    model, x = (
        (Dot(), (torch.randn(24), torch.randn(24)))
        if kind == "dot"
        else (Mv(), (torch.randn(8, 24), torch.randn(24)))
    )
    spec = EthosUNGCompileSpec(target)
    edge, part = lower(quantize(model, x, spec, calibration=[x]), x, spec)
    assert len(part.report.partitions) == 1
    # only the program's float IO is quantized and dequantized on the CPU
    assert all("quantize_per_tensor" in n for n in part.report.cpu_reasons), part.report
    infos = delegate_infos(edge)
    assert [i.lowering_verification.status for i in infos] == ["verified"]
    assert [i.npu_verification.status for i in infos] == ["verified"]
