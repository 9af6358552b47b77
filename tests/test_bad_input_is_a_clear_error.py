# SPDX-License-Identifier: BSD-3-Clause
"""Bad input gets a clear error naming the culprit; nothing half-done."""

import logging

import pytest
import torch
from models import SmallCNN
from tosa.DType import DType

from ethosu_ng import BoundaryContractError, EthosUNGCompileSpec, EthosUNGPartitioner, TensorSpec
from ethosu_ng.compiler.io_check import check_io
from ethosu_ng.partitioning.delegate_io import DelegateIOSpec
from ethosu_ng.tosa_graph import TosaTensorInfo
from ethosu_ng.vela.compiler import VelaResult, VelaTensor


def test_unknown_target():
    with pytest.raises(ValueError, match="valid targets"):
        EthosUNGCompileSpec("ethos-u99-1")


@pytest.mark.parametrize(
    "entry", ["bmm", "aten.not_an_op.default", "aten.bmm.nonexistent", 42, torch.bmm]
)
def test_cpu_ops_entry_that_is_not_an_op(entry):
    with pytest.raises(ValueError, match=r"cpu_ops\[0\]"):
        EthosUNGPartitioner(EthosUNGCompileSpec("ethos-u55-128"), cpu_ops=[entry])


def test_cpu_ops_must_be_a_list():
    with pytest.raises(TypeError):
        EthosUNGPartitioner(EthosUNGCompileSpec("ethos-u55-128"), cpu_ops="aten.bmm.default")


def test_partitioner_needs_our_compile_spec():
    with pytest.raises(TypeError, match="EthosUNGCompileSpec"):
        EthosUNGPartitioner("ethos-u55-128")


def test_float_model_delegates_nothing_and_stays_runnable(caplog):
    """A model that was never quantized: a warning saying why, and a CPU-only program that runs."""
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    model, x = SmallCNN().eval(), SmallCNN.example()
    part = EthosUNGPartitioner(EthosUNGCompileSpec("ethos-u55-128"))
    with caplog.at_level(logging.WARNING):
        edge = to_edge_transform_and_lower(torch.export.export(model, x), partitioner=[part])
    assert "nothing to delegate" in caplog.text and "EthosUNGQuantizer" in caplog.text
    assert part.report.partitions == {}
    # Every CPU node has a reason, and for the ops the NPU runs once quantized it is the cause
    # (never quantized), not the catch-all the partitioner falls back to.
    reasons, targets = part.report.cpu_reasons, part.report.cpu_targets
    assert set(reasons) == set(targets)
    npu_ops = {"aten.convolution.default", "aten.relu.default", "aten.add.Tensor", "aten.mean.dim"}
    assert npu_ops <= set(targets.values())
    for name, op in targets.items():
        if op in npu_ops:
            assert "not marked as quantized" in reasons[name], (name, reasons[name])
    pte = edge.to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    out = method.execute(list(x))[0]
    torch.testing.assert_close(out, model(*x), rtol=1e-4, atol=1e-4)


def _vela(elem_sizes_in, elem_sizes_out, shape=(1, 1, 1, 1, 2, 4), offsets=(0, 0)):
    def t(e, offset):
        return VelaTensor(shape, e, 1, offset)

    return VelaResult(
        b"",
        b"",
        64,
        0,
        [t(e, offsets[0]) for e in elem_sizes_in],
        [t(e, offsets[1]) for e in elem_sizes_out],
    )


def _declared(dtype_in, dtype_out):
    return DelegateIOSpec(
        [TensorSpec(dtype_in, (2, 4), (0, 1), 0.1, 0)],
        [TensorSpec(dtype_out, (2, 4), (0, 1), 0.25, -3)],
        ["x_q"],
        ["view_copy_3"],
    )


def test_preprocess_check_names_node_index_and_both_types():
    # Seed 000's failure, caught at export: declared float/int16 output while Vela writes int8.
    declared = _declared(torch.int8, torch.int16)
    tosa_in = [TosaTensorInfo("in", DType.INT8, (2, 4))]
    tosa_out = [TosaTensorInfo("out", DType.INT8, (2, 4))]
    with pytest.raises(BoundaryContractError) as e:
        check_io("ethosu_ng_0", declared, tosa_in, tosa_out, _vela([1], [1]))
    msg = str(e.value)
    assert "ethosu_ng_0" in msg and "output 0" in msg and "view_copy_3" in msg
    assert "torch.int16" in msg and "INT8" in msg


def test_preprocess_check_catches_vela_element_size():
    declared = _declared(torch.int8, torch.int8)
    tosa = [TosaTensorInfo("t", DType.INT8, (2, 4))]
    with pytest.raises(BoundaryContractError, match=r"input 0 \(x_q\).*Vela reads 2 B/element"):
        check_io("p", declared, tosa, tosa, _vela([2], [1]))


def test_preprocess_check_catches_shape_and_count():
    declared = _declared(torch.int8, torch.int8)
    tosa = [TosaTensorInfo("t", DType.INT8, (2, 4))]
    with pytest.raises(BoundaryContractError, match="shape"):
        check_io("p", declared, tosa, tosa, _vela([1], [1], shape=(1, 1, 1, 1, 3, 4)))
    with pytest.raises(BoundaryContractError, match="count"):
        check_io("p", declared, tosa, tosa + tosa, _vela([1], [1]))


def test_preprocess_check_passes_and_places_io():
    """A passing check returns the declared dtype/shape/qparams of each tensor, placed where
    Vela put that same tensor (distinct offsets: a swap or a dropped placement shows)."""
    declared = _declared(torch.int8, torch.int8)
    tosa = [TosaTensorInfo("t", DType.INT8, (2, 4))]
    io = check_io("p", declared, tosa, tosa, _vela([1], [1], offsets=(48, 96)))
    for got, want, offset in (
        (io.inputs[0], declared.inputs[0], 48),
        (io.outputs[0], declared.outputs[0], 96),
    ):
        assert (got.dtype, got.shape, got.scale, got.zero_point) == (
            want.dtype,
            want.shape,
            want.scale,
            want.zero_point,
        )
        assert got.offset == offset


class _OutOfDomain(torch.nn.Module):
    """``op`` on a ReLU'd input: the ReLU before it is finite, ``op`` is not on part of it."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x):
        return self.op(torch.relu(x) - 1.0) * 2


@pytest.mark.parametrize(
    "op, name", [(torch.acosh, "acosh"), (torch.log, "log"), (torch.sqrt, "sqrt")]
)
def test_calibration_outside_an_ops_domain_names_the_node(op, name):
    """A calibration batch on which an op gives NaN or an infinity (acosh below 1, log of 0 or
    less, sqrt of a negative) is a ``CalibrationError`` naming the batch, the node, how many
    values and the model's source line, in one line: not torch's "range of [nan, nan] is not
    finite" from inside an observer."""
    from ethosu_ng.export import CalibrationError, quantize

    good, bad = torch.full((1, 4, 3), 3.0), torch.linspace(-2, 2, 12).reshape(1, 4, 3)
    with pytest.raises(CalibrationError) as e:
        quantize(_OutOfDomain(op), (good,), EthosUNGCompileSpec("ethos-u55-128"), [(good,), (bad,)])
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert msg.startswith("calibration batch 1: node "), msg
    assert f"{name} (aten.{name}.default" in msg or f"from {name}: aten.{name}.default)" in msg, msg
    assert "return self.op(torch.relu(x) - 1.0) * 2" in msg, msg
