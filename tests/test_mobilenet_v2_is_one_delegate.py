# SPDX-License-Identifier: BSD-3-Clause
"""A real CNN (torchvision MobileNetV2, random weights) lowers to one delegate and a .pte."""

import pytest
import torch
from _pte import assert_pte_carries, lowered_delegates
from _tools import require_tool

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.partitioning.boundary import float_boundary_tensors

torchvision = require_tool("torchvision", module=True, install="pip install -e .[zoo]")


# U85 in the slow set: CI's budget keeps one whole-CNN lowering (the zoo runs both families).
@pytest.mark.parametrize(
    "target", ["ethos-u55-128", pytest.param("ethos-u85-256", marks=pytest.mark.slow)]
)
def test_mobilenet_v2_is_one_delegate(target):
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    x = (torch.randn(1, 3, 224, 224),)
    spec = EthosUNGCompileSpec(target)
    q = quantize(model, x, spec, calibration=[x, (torch.randn(1, 3, 224, 224),)])
    edge, part = lower(q, x, spec)
    program = edge.exported_program()
    assert list(part.report.partitions) == ["ethosu_ng_0"]
    assert float_boundary_tensors(program) == []
    # Only the program-edge quantize/dequantize stay on the CPU.
    cpu = set(part.report.cpu_targets.values())
    assert cpu <= {
        "quantized_decomposed.quantize_per_tensor.default",
        "quantized_decomposed.dequantize_per_tensor.default",
    }, cpu
    blob = DelegateBlob.from_bytes(program.graph_module.lowered_module_0.processed_bytes)
    assert blob.inputs[0].shape == (1, 3, 224, 224) and blob.inputs[0].dtype == torch.int8
    assert blob.outputs[0].shape == (1, 1000) and blob.outputs[0].dtype == torch.int8
    assert len(blob.weights) > 2_000_000  # 3.5M parameters, int8 + Vela encoding
    assert_pte_carries(lowered_delegates(edge), edge.to_executorch().buffer)
