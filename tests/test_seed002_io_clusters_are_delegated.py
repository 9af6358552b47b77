"""Seed 002: with uint8 program IO, shared-qspec clusters touching the IO are quantized and
delegated, never left in float on the CPU: view/reshape right after the input, cat of a
computed tensor and a raw input, cat producing the output, and a state buffer updated through
slice -> cat -> copy_ (upstream 1.5.1 rejects that one and delegates nothing)."""

import pytest
import torch
import torch.nn as nn

from ethosu_ng import EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates, run_program_on_tosa
from ethosu_ng.partitioning.boundary import float_boundary_tensors


class ViewAtInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        return self.fc(x.reshape(1, 48)).view(2, 5)


class CatInputAndOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 3, 1)

    def forward(self, x, y):
        return torch.cat((self.c(x), y), 1)


class StreamingState(nn.Module):
    """A 16-step window over a stream of 4-sample chunks."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(1, 8, 16))
        self.conv = nn.Conv1d(8, 8, 1)

    def forward(self, x):
        new = torch.cat((self.state[:, :, 4:], x), dim=2)
        self.state.copy_(new)
        return self.conv(new)


CASES = {
    "view_at_input": (ViewAtInput, [(1, 3, 4, 4)]),
    "cat_input_and_output": (CatInputAndOutput, [(1, 3, 4, 4), (1, 3, 4, 4)]),
    "state_buffer_slice_cat_copy": (StreamingState, [(1, 8, 4)]),
}


def batch(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.rand(s, generator=g) for s in shapes)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_io_cluster_is_delegated(case, target):
    cls, shapes = CASES[case]
    x = batch(shapes, 0)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(
        cls().eval(),
        x,
        spec,
        calibration=[batch(shapes, k) for k in range(4)],
        input_dtype=torch.uint8,
        output_dtype=torch.int8,
    )
    edge, part = lower(q, x, spec)
    program = edge.exported_program()
    assert len(part.report.partitions) == 1
    assert part.report.cpu_targets == {}, part.report.cpu_reasons  # nothing float on the CPU
    assert float_boundary_tensors(program) == []
    ioq = io_quantization(edge)
    assert [i.dtype for i in ioq.inputs] == [torch.uint8] * len(shapes)
    assert ioq.outputs[0].dtype == torch.int8
    for k in range(3):
        xs = batch(shapes, 10 + k)
        xi = tuple(i.quantize(t) for i, t in zip(ioq.inputs, xs))
        assert max(r.worst for r in check_delegates(edge, xi)) <= 1
    edge.to_executorch()


def test_state_buffer_is_int8_and_streams_like_the_quantized_model():
    shapes = [(1, 8, 4)]
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    calib = [batch(shapes, k) for k in range(4)]
    q = quantize(
        StreamingState().eval(),
        calib[0],
        spec,
        calibration=calib,
        input_dtype=torch.uint8,
        output_dtype=torch.int8,
    )
    q.state.zero_()  # calibration advanced the float state; start both from zero
    edge, _ = lower(q, calib[0], spec)
    program = edge.exported_program()
    state_specs = [s for s in program.graph_signature.input_specs if s.target == "state"]
    assert state_specs and program.state_dict["state"].dtype == torch.int8
    ioq = io_quantization(edge)
    lowered = program.module()
    for k in range(6):  # the window fills over 4 steps; compare every step, state carried
        (xf,) = batch(shapes, 20 + k)
        got = run_program_on_tosa(lowered, (ioq.inputs[0].quantize(xf),))[0]
        want = ioq.outputs[0].quantize(q(xf))
        assert (got.int() - want.int()).abs().max() <= 1, f"step {k}"


def test_state_buffer_initial_value_survives_serialization():
    """The int8 state's initial value (quantized zeros = the zero point, not byte 0) is in the .pte:
    the first step on the C++ host runtime equals the eager quantized model's first step."""
    from ethosu_ng.runtime import run_pte

    shapes = [(1, 8, 4)]
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
    calib = [batch(shapes, k) for k in range(4)]
    q = quantize(
        StreamingState().eval(),
        calib[0],
        spec,
        calibration=calib,
        input_dtype=torch.uint8,
        output_dtype=torch.int8,
    )
    q.state.zero_()
    edge, _ = lower(q, calib[0], spec)
    ioq = io_quantization(edge)
    pte = edge.to_executorch().buffer
    (xf,) = batch(shapes, 30)
    got = run_pte(pte, [ioq.inputs[0].quantize(xf)])[0]
    want = ioq.outputs[0].quantize(q(xf))
    assert (got.int() - want.int()).abs().max() <= 1
