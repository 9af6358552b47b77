# SPDX-License-Identifier: BSD-3-Clause
"""Every pass's guarantee (``ProgramPass.ensures``) holds after the whole pipeline, and a later
pass that breaks one is an error naming the pass whose guarantee broke and the culprit node."""

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st
from models import TinyClassifier

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import quantize
from ethosu_ng.ops import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR
from ethosu_ng.passes import (
    Aspect,
    LowerRollPass,
    PassContractError,
    ProgramPass,
    QuantizeStateBuffersPass,
    pass_pipeline,
    run_passes,
)

SPEC = EthosUNGCompileSpec("ethos-u55-128")


def _uint8_io_program():
    g = torch.Generator().manual_seed(0)
    data = [(torch.rand(1, 3, 8, 8, generator=g),) for _ in range(4)]
    q = quantize(
        TinyClassifier(), data[0], SPEC, data, input_dtype=torch.uint8, output_dtype=torch.int8
    )
    return torch.export.export(q, data[0])


def _dtype(n):
    return n.args[5] if n.op == "call_function" and len(n.args) > 5 else None


class ReadUint8Directly(ProgramPass):
    """Planted: an op reads the uint8 dequantize the signed-interior re-typing went around."""

    modifies = frozenset({Aspect.QDQ_PLACEMENT})

    def __call__(self, program):
        for dq_u8 in program.graph_module.graph.nodes:
            if dq_u8.target != DEQUANTIZE_PER_TENSOR or _dtype(dq_u8) != torch.uint8:
                continue
            for q in list(dq_u8.users):
                for dq in list(q.users) if q.target == QUANTIZE_PER_TENSOR else ():
                    for op in list(dq.users):
                        op.replace_input_with(dq, dq_u8)
                        self.culprit = op.name
                        return program
        raise AssertionError("no uint8 dequantize re-typed to int8 in the program")


class FloatInputAgain(ProgramPass):
    """Planted: the program's input placeholder is float again."""

    modifies = frozenset({Aspect.PROGRAM_IO})

    def __call__(self, program):
        (name,) = program.graph_signature.user_inputs
        x = next(n for n in program.graph_module.graph.nodes if n.name == name)
        x.meta["val"] = x.meta["val"].float()
        return program


class FloatOutputAgain(ProgramPass):
    """Planted: the program's output is float again."""

    modifies = frozenset({Aspect.PROGRAM_IO})

    def __call__(self, program):
        (out,) = program.graph_module.graph.output_node().args[0]
        out.meta["val"] = out.meta["val"].float()
        return program


def test_the_pipeline_keeps_every_guarantee_at_uint8_io():
    program = run_passes(_uint8_io_program(), pass_pipeline(), SPEC)
    assert any(_dtype(n) == torch.uint8 for n in program.graph_module.graph.nodes)


def test_an_op_reading_uint8_inside_breaks_signed_interior():
    with pytest.raises(
        PassContractError, match=r"SignedInteriorPass.*read\(s\) the uint8 dequantize"
    ):
        run_passes(_uint8_io_program(), list(pass_pipeline()) + [ReadUint8Directly], SPEC)


def test_a_float_input_breaks_integer_program_io():
    with pytest.raises(
        PassContractError,
        match=r"IntegerProgramIOPass.*program input 0 \(\w+\) is torch.float32, not torch.uint8",
    ):
        run_passes(_uint8_io_program(), list(pass_pipeline()) + [FloatInputAgain], SPEC)


def test_a_float_output_breaks_integer_program_io():
    with pytest.raises(
        PassContractError,
        match=r"IntegerProgramIOPass.*program output 0 \(\w+\) is torch.float32, not torch.int8",
    ):
        run_passes(_uint8_io_program(), list(pass_pipeline()) + [FloatOutputAgain], SPEC)


class _Gather(nn.Module):
    def forward(self, x, index):
        return torch.gather(x, 1, index)


class Int32IndexAgain(ProgramPass):
    """Planted: the CPU's gather reads the int32 index again, past its int64 cast."""

    modifies = frozenset({Aspect.CPU_INDEX_DTYPE})

    def __call__(self, program):
        for n in program.graph_module.graph.nodes:
            if n.target == torch.ops.aten._to_copy.default and n.kwargs.get("dtype") == torch.int64:
                n.replace_all_uses_with(n.args[0])
        program.graph_module.graph.eliminate_dead_code()
        return program


def test_an_int32_index_on_the_cpu_breaks_cpu_index_int64():
    """Ethos-U55 never takes a gather: ExecuTorch's portable kernel runs it and takes an int64
    index only."""
    g = torch.Generator().manual_seed(2)
    x, index = torch.randn(4, 5, generator=g), torch.randint(0, 5, (3, 4), generator=g)
    program = torch.export.export(quantize(_Gather(), (x, index), SPEC, [(x, index)]), (x, index))
    run_passes(program, pass_pipeline(), SPEC)  # the guarantee holds
    program = torch.export.export(quantize(_Gather(), (x, index), SPEC, [(x, index)]), (x, index))
    with pytest.raises(
        PassContractError,
        match=r"CpuIndexInt64Pass.*gather.*runs on the CPU but reads int32 index \w+",
    ):
        run_passes(program, list(pass_pipeline()) + [Int32IndexAgain], SPEC)


class Rolls(nn.Module):
    def __init__(self, shifts, dims):
        super().__init__()
        self.shifts, self.dims = shifts, dims

    def forward(self, x):
        return torch.roll(x + 1, self.shifts, self.dims)


class RollAgain(ProgramPass):
    """Planted: a roll with static shifts appears after LowerRollPass ran."""

    modifies = frozenset({Aspect.SLICES_AND_CATS})

    def __call__(self, program):
        graph = program.graph_module.graph
        out = graph.output_node()
        y = out.args[0][0]
        with graph.inserting_before(out):
            r = graph.call_function(torch.ops.aten.roll.default, (y, [1], [0]))
        r.meta = dict(y.meta)
        out.args = ((r,),)
        return program


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
)
def test_every_static_roll_is_lowered_exactly(shape, data):
    """Over shapes, shifts (negative, zero, whole turns) and dims (negative too): no roll is left
    (the pass's guarantee) and the lowered program computes ``torch.roll``."""
    rank = len(shape)
    dims = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank))
    shifts = data.draw(st.lists(st.integers(-12, 12), min_size=len(dims), max_size=len(dims)))
    x = torch.randn(shape)
    model = Rolls(shifts, dims)
    program = torch.export.export(model, (x,))
    program = run_passes(program, [LowerRollPass])
    targets = {n.target for n in program.graph_module.graph.nodes}
    assert torch.ops.aten.roll.default not in targets
    torch.testing.assert_close(program.module()(x), model(x), rtol=0, atol=0)


def test_a_roll_after_lower_roll_is_named():
    program = torch.export.export(Rolls([2], [1]), (torch.randn(2, 5),))
    with pytest.raises(PassContractError, match=r"LowerRollPass.*roll\w* \(aten.roll\)"):
        run_passes(program, [LowerRollPass, RollAgain])


class _RunningPeak(nn.Module):
    """Keeps the largest output value seen in a state buffer, updated in place."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.register_buffer("peak", torch.zeros(1))

    def forward(self, x):
        y = self.conv(x)
        self.peak.copy_(torch.maximum(self.peak, y.amax().reshape(1)))
        return y


@pytest.mark.parametrize("out_dtype", [torch.int8, torch.uint8])
def test_a_float_state_update_is_not_a_user_output_of_integer_io(out_dtype):
    """A program functionalized before lowering (``run_decompositions``) returns the buffer's new
    value as a BUFFER_MUTATION output ahead of the user's. With the state kept float (its int8
    storage, ``QuantizeStateBuffersPass``, disabled) it stays on the CPU; integer program IO types
    the user's outputs only, and its guarantee holds."""
    x = (torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)),)
    q = quantize(_RunningPeak(), x, SPEC, [x], input_dtype=torch.int8, output_dtype=out_dtype)
    program = torch.export.export(q, x).run_decompositions({})
    program = run_passes(program, pass_pipeline([QuantizeStateBuffersPass]), SPEC)
    outs = program.graph_module.graph.output_node().args[0]
    kinds = [s.kind.name for s in program.graph_signature.output_specs]
    assert kinds == ["BUFFER_MUTATION", "USER_OUTPUT"]
    assert [a.meta["val"].dtype for a in outs] == [torch.float32, out_dtype]


class _TakesAnInt(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x, n: int):
        return self.conv(x) + n


def test_an_int_program_input_is_left_as_it_is_by_integer_io():
    """An int argument exported as a symbol (``Dim.DYNAMIC``) is a user input that is not a
    tensor: integer program IO types the tensor inputs and leaves it an int. (The quantized
    module adds the example's ``n``, which ``quantize`` exports as a constant.)"""
    x = (torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)), 3)
    q = quantize(_TakesAnInt(), x, SPEC, [x], input_dtype=torch.int8, output_dtype=torch.int8)
    dynamic = {"x": None, "n": torch.export.Dim.DYNAMIC}
    program = torch.export.export(q, x, dynamic_shapes=dynamic)
    program = run_passes(program, pass_pipeline(), SPEC)
    user_inputs = program.graph_signature.user_inputs
    vals = {
        n.name: n.meta["val"]
        for n in program.graph_module.graph.nodes
        if n.op == "placeholder" and n.name in user_inputs
    }
    assert list(vals) == ["x", "n"]
    assert vals["x"].dtype == torch.int8 and isinstance(vals["n"], torch.SymInt)
