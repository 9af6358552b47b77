# SPDX-License-Identifier: BSD-3-Clause
"""ethosu_ng.tools.op_test_shapes: drawn shapes for upstream's op tests are valid for the float
module, differ from the originals, keep the sizes the module's parameters fix, and are the same
for the same seed and case."""

from __future__ import annotations

import pytest
import torch

from ethosu_ng.tools import op_test_shapes
from ethosu_ng.tools import upstream_op_tests as op_tests


class AddConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x, y):
        return self.conv(x + y)


def test_perturbed_shapes_are_valid_new_and_deterministic():
    module = AddConv().eval()
    inputs = (torch.randn(1, 3, 8, 8), torch.rand(1, 3, 8, 8))
    seen = set()
    for k in range(12):
        new, info = op_test_shapes.perturb(module, inputs, seed=3, key=f"case#{k}")
        assert new is not None, info
        again, _ = op_test_shapes.perturb(module, inputs, seed=3, key=f"case#{k}")
        assert all(torch.equal(a, b) for a, b in zip(new, again))
        shapes = [list(t.shape) for t in new]
        assert shapes == info["shapes"] and shapes != info["original_shapes"]
        # x + y: both change alike; the conv's input channels stay; the kernel fits.
        assert shapes[0] == shapes[1] and shapes[0][1] == 3, info
        assert min(shapes[0][2:]) >= 3, info
        assert all(t.numel() <= op_test_shapes.MAX_ELEMENTS for t in new)
        # Values are drawn from the original's: y stays in [0, 1).
        assert float(new[1].min()) >= 0 and float(new[1].max()) < 1
        seen.add(tuple(shapes[0]))
        module(*new)
    assert len(seen) > 6, seen


def test_a_module_no_shape_fits_has_no_valid_perturbation():
    module = torch.nn.Linear(5, 2).eval()
    new, info = op_test_shapes.perturb(module, (torch.randn(5),), seed=0, key="linear")
    assert new is None and len(info["refused"]) == op_test_shapes.TRIES, info


def test_perturbed_case_keys_and_records():
    case = op_tests.Case("test_add", "f", "p", "u55", 0, "pass", "int8", "EthosU55PipelineINT")
    assert case.key == "test_add::f[p]@u55"
    perturbed = op_tests.Case(**{**case.__dict__, "perturb_seed": 1, "perturb_index": 2})
    assert perturbed.key == "test_add::f[p]@u55~shapes1.2"
    assert perturbed.base_key == case.key
    on_cpu = {"stage": None, "within_1lsb": True, "fully_delegated": False, "cpu_ops": []}
    assert op_tests.failure_class(on_cpu) == ""
    on_cpu["upstream_shapes_fully_delegated"] = True
    # No compute op anywhere (a slice that selects everything): nothing was left behind.
    assert op_tests.failure_class(on_cpu) == ""
    on_cpu["cpu_ops"] = ["add"]
    assert op_tests.failure_class(on_cpu) == "delegation: add on the CPU"


@pytest.mark.slow
def test_a_perturbed_upstream_case_runs_at_its_drawn_shapes():
    case = op_tests.Case(
        "test_add",
        "test_add_tensor_u85_INT",
        "5d_float",
        "u85",
        0,
        "pass",
        "int8",
        "EthosU85PipelineINT",
        perturb_seed=0,
    )
    rec = op_tests.run_case(case)
    assert rec["stage"] is None, rec.get("traceback")
    assert rec["shapes"] != rec["original_shapes"], rec
    assert rec["fully_delegated"] and rec["within_1lsb"], rec
