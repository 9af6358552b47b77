# SPDX-License-Identifier: BSD-3-Clause
"""Seed 004: uint8 / int8 program IO. Firmware feeds camera bytes straight in and reads int8
scores; uint8 exists only at the program boundary, int8 everywhere inside a delegate."""

import pytest
import torch
from _pte import CrossCheckedMethod
from models import TinyClassifier

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec, EthosUNGQuantizer, io_quantization
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates, run_program_on_tosa
from ethosu_ng.ops import CALL_DELEGATE
from ethosu_ng.partitioning.boundary import float_boundary_tensors
from ethosu_ng.tosa_graph import tosa_io, tosa_ops


def images(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(1, 3, 8, 8, generator=g),) for _ in range(n)]


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.int8])
def test_integer_program_io(in_dtype, target):
    model, x = TinyClassifier().eval(), images(1, 0)[0]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    calibration = images(8, 1)
    q = quantize(
        model, x, spec, calibration=calibration, input_dtype=in_dtype, output_dtype=torch.int8
    )
    edge, part = lower(q, x, spec)
    program = edge.exported_program()

    ioq = io_quantization(edge)
    assert [i.dtype for i in ioq.inputs] == [in_dtype]
    assert [o.dtype for o in ioq.outputs] == [torch.int8]
    assert part.report.cpu_targets == {}, "no CPU quantize/dequantize at the edges"
    assert float_boundary_tensors(program) == []

    blob = DelegateBlob.from_bytes(program.graph_module.lowered_module_0.processed_bytes)
    assert blob.inputs[0].dtype == in_dtype
    assert blob.inputs[0].scale == pytest.approx(ioq.inputs[0].scale)
    assert blob.inputs[0].zero_point == ioq.inputs[0].zero_point
    assert blob.outputs[0].zero_point == ioq.outputs[0].zero_point
    # The IO's qparams are the very numbers the quantized model applies to its input.
    (q_in,) = [
        n
        for n in q.graph.nodes
        if n.op == "call_function"
        and "quantize_per_tensor" in str(n.target)
        and n.args[0].op == "placeholder"
    ]
    assert (ioq.inputs[0].scale, ioq.inputs[0].zero_point) == tuple(q_in.args[1:3])
    if in_dtype == torch.uint8:
        # [0, 1) images: zero point 0 and 255 steps spanning what calibration saw. The observer
        # (a histogram) picks a range inside the data, so scale * 255 lies within the batches'
        # maxima (measured: 0.99915 on both targets; batch maxima 0.99152 .. 0.99964).
        batch_max = [b.max().item() for (b,) in calibration]
        assert ioq.inputs[0].zero_point == 0
        assert min(batch_max) <= ioq.inputs[0].scale * 255 <= max(batch_max)

    # uint8 only at the IO: inside the partition every non-placeholder tensor is int8/int32/float,
    # and in TOSA the unsigned step is a RESCALE with input_unsigned set.
    inner = program.graph_module.lowered_module_0.original_module
    for n in inner.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and v.dtype == torch.uint8:
            assert n.op == "placeholder" or "dequantize" in str(n.target), n.name
    ops = tosa_ops(blob.tosa)
    rescale_unsigned = [o for o in ops if o.op == "RESCALE" and o.input_unsigned]
    assert bool(rescale_unsigned) == (in_dtype == torch.uint8)
    tin, tout = tosa_io(blob.tosa)
    assert tin[0].dtype_name == "INT8" and tout[0].dtype_name == "INT8"

    # Numerics: delegate vs eager quantized model; whole program vs eager model in output LSB.
    for (xf,) in images(4, 2):
        xi = ioq.inputs[0].quantize(xf)
        assert xi.dtype == in_dtype
        assert max(r.worst for r in check_delegates(edge, (xi,))) <= 1
        got = run_program_on_tosa(edge, (xi,))[0]
        assert got.dtype == torch.int8
        want = ioq.outputs[0].quantize(q(xf))
        assert (got.to(torch.int32) - want.to(torch.int32)).abs().max() <= 1

    # The .pte on the host runtime: NPU model (U55) == TOSA reference model, bit for bit.
    method = CrossCheckedMethod(edge.to_executorch().buffer, spec.target)
    for (xf,) in images(4, 2):
        assert method.execute([ioq.inputs[0].quantize(xf)], target)[0].dtype == torch.int8


def test_uint8_output():
    model, x = TinyClassifier().eval(), images(1, 0)[0]
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    q = quantize(
        model, x, spec, calibration=images(4, 1), input_dtype=torch.uint8, output_dtype=torch.uint8
    )
    edge, part = lower(q, x, spec)
    ioq = io_quantization(edge)
    assert ioq.outputs[0].dtype == torch.uint8
    assert part.report.cpu_targets == {}
    blob = DelegateBlob.from_bytes(
        edge.exported_program().graph_module.lowered_module_0.processed_bytes
    )
    assert any(o.op == "RESCALE" and o.output_unsigned for o in tosa_ops(blob.tosa))
    xi = ioq.inputs[0].quantize(x[0])
    assert max(r.worst for r in check_delegates(edge, (xi,))) <= 1
    method = CrossCheckedMethod(edge.to_executorch().buffer, spec.target)
    assert method.runs_npu_model
    for (xf,) in images(3, 3):
        assert method.execute([ioq.inputs[0].quantize(xf)])[0].dtype == torch.uint8


def test_float_io_stays_float_by_default():
    model, x = TinyClassifier().eval(), images(1, 0)[0]
    spec = EthosUNGCompileSpec("ethos-u55-128")
    edge, part = lower(quantize(model, x, spec), x, spec)
    ioq = io_quantization(edge.to_executorch())
    assert ioq.inputs[0].dtype == torch.float32 and ioq.inputs[0].scale is None
    assert ioq.outputs[0].dtype == torch.float32


def test_bad_io_dtype_is_rejected():
    spec = EthosUNGCompileSpec("ethos-u55-128")
    with pytest.raises(ValueError, match="input_dtype"):
        EthosUNGQuantizer(spec, input_dtype=torch.float16)
    with pytest.raises(ValueError, match="output_dtype"):
        EthosUNGQuantizer(spec, output_dtype=torch.int32)


def test_an_unused_input_is_named_not_an_index_error():
    """An input forward() never reads has no quantize to take an integer type from."""

    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x, unused):
            return self.conv(x)

    torch.manual_seed(0)
    x = (torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8))
    spec = EthosUNGCompileSpec("ethos-u55-128")
    q = quantize(Unused().eval(), x, spec, input_dtype=torch.int8)
    with pytest.raises(ValueError, match=r"program input 1 \(unused\) is not read by the model"):
        lower(q, x, spec)


class _TwoInTwoOut(torch.nn.Module):
    """One partition with two inputs and two outputs, one of which it reads again."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3)
        self.b = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x, y):
        h = torch.relu(self.a(x))
        return h, self.b(h) + y


def test_the_partition_report_lists_every_delegate_input_and_output():
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(1, 3, 8, 8, generator=g), torch.rand(1, 4, 6, 6, generator=g))
    spec = EthosUNGCompileSpec("ethos-u55-128")
    q = quantize(
        _TwoInTwoOut(), x, spec, calibration=[x], input_dtype=torch.int8, output_dtype=torch.int8
    )
    edge, part = lower(q, x, spec)
    graph = edge.exported_program().graph_module.graph
    (delegate,) = [n for n in graph.nodes if n.target is CALL_DELEGATE]
    (io,) = part.report.io.values()
    assert [n.name for n in io.inputs] == [a.name for a in delegate.args[1:]] == ["x", "y"]
    assert len(io.outputs) == len(delegate.users) == 2
