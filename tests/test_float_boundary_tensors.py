# SPDX-License-Identifier: BSD-3-Clause
"""``float_boundary_tensors`` is the oracle of every "no float tensor crosses a delegate
boundary" assertion in the suite, so it is tested on programs that do have float boundaries:
lowered by ExecuTorch's demo partitioner, which delegates every op whatever its dtypes."""

import pytest
import torch
from executorch.exir import to_edge
from executorch.exir.backend.backend_api import to_backend
from executorch.exir.backend.test.op_partitioner_demo import AllNodesPartitionerDemo

from ethosu_ng.partitioning.boundary import float_boundary_tensors


class _Add(torch.nn.Module):
    def forward(self, x, y):
        return torch.add(x, y)


class _AddHalf(torch.nn.Module):
    """An integer input, a float output: the cast is inside the delegate."""

    def forward(self, x):
        return torch.add(x, 0.5)


class _Positive(torch.nn.Module):
    """A float input, an integer output."""

    def forward(self, x):
        return (x > 0).to(torch.int32)


def _lowered(module, inputs):
    edge = to_edge(torch.export.export(module, inputs))
    return to_backend(edge.exported_program(), AllNodesPartitionerDemo())


def _sample(dtype):
    if dtype == torch.bool:
        return torch.rand(2, 3) > 0.5
    if dtype.is_floating_point:
        return torch.randn(2, 3).to(dtype)
    return torch.randint(0, 5, (2, 3), dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_float_delegate_names_each_input_and_the_output(dtype):
    bad = float_boundary_tensors(_lowered(_Add(), (_sample(dtype), _sample(dtype))))
    assert len(bad) == 3, bad
    assert [b.split(" (")[0].split(" ", 1)[1] for b in bad] == ["input 0", "input 1", "output 0"]
    assert all(str(dtype) in b for b in bad), bad


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8])
def test_an_integer_delegate_with_a_float_result_names_the_output_only(dtype):
    bad = float_boundary_tensors(_lowered(_AddHalf(), (_sample(dtype),)))
    assert len(bad) == 1 and " output 0 (torch.float32)" in bad[0], bad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_float_input_with_an_integer_result_names_the_input_only(dtype):
    bad = float_boundary_tensors(_lowered(_Positive(), (_sample(dtype),)))
    assert len(bad) == 1 and " input 0 (" in bad[0] and str(dtype) in bad[0], bad


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8])
def test_an_integer_delegate_crosses_clean(dtype):
    program = _lowered(_Add(), (_sample(dtype), _sample(dtype)))
    delegates = [n for n in program.graph_module.graph.nodes if "call_delegate" in str(n.target)]
    assert delegates, "the demo partitioner delegated nothing: the test would prove nothing"
    assert float_boundary_tensors(program) == []


@pytest.mark.parametrize(
    "dtype, bool_crosses, expect",
    [
        (torch.float32, False, "is torch.float32 from outside the partition"),
        (torch.float16, True, "is torch.float16 from outside the partition"),
        (torch.bool, False, "is torch.bool from outside the partition (the target has no bool"),
        (torch.bool, True, None),
        (torch.int8, False, None),
    ],
)
def test_the_contract_excludes_a_node_reading_what_may_not_cross(dtype, bool_crosses, expect):
    """A partition of the second op alone: its input comes from outside. The contract names it
    where that dtype may not cross, and shrinking removes the node; an integer (or, where the
    target has bool tensors, a bool) input may cross."""
    from ethosu_ng.partitioning.boundary import BoundaryContract

    class TwoOps(torch.nn.Module):
        def forward(self, x):
            y = torch.logical_not(x) if dtype == torch.bool else x + x
            return torch.logical_not(y) if dtype == torch.bool else y * y

    program = to_edge(torch.export.export(TwoOps(), (_sample(dtype),))).exported_program()
    ops = [n for n in program.graph_module.graph.nodes if n.op == "call_function"]
    second = ops[-1]
    contract = BoundaryContract(program, bool_crosses=bool_crosses)
    why = contract.why_excluded(second, {second})
    if expect is None:
        assert why is None
        assert contract.shrink({second}) == {}
    else:
        assert why is not None and expect in why and ops[0].name in why, why
        part = {second}
        assert contract.shrink(part) == {second: why} and part == set()
