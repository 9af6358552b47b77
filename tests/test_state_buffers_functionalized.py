# SPDX-License-Identifier: BSD-3-Clause
"""A state buffer is stored in int8 on the NPU whichever form its write-back takes: the
``copy_(state, new)`` of ``torch.export.export``, or the ``BUFFER_MUTATION`` output of a program
functionalized before lowering (``run_decompositions``).

Over window lengths and steps, int8 and uint8 program IO: both forms of the same quantized
streaming model (``test_property_seed002.Streaming``) are lowered; in each the buffer is int8 in
the program's state dict, nothing runs on the CPU (no float ``slice -> cat``), the functionalized
program's write-back output is int8 and its spec names the output node's argument, and the two
``.pte`` give the same outputs bit for bit over four steps, state carried, within 1 LSB of the
eager quantized model.

The pass alone, over the streaming cases of seed 002 (any rank, axis, window, step, readers):
it stores the buffer in int8 in both forms, the functionalized write-back output becomes the
quantize with the output spec renamed to it, and the two programs compute the same outputs and
states, step after step.
"""

import pytest
import torch
from _pte import CrossCheckedMethod
from executorch.exir import to_edge_transform_and_lower
from hypothesis import HealthCheck, given, settings
from test_property_seed002 import Streaming, streaming_cases, streaming_model

from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner, io_quantization
from ethosu_ng.export import quantize
from ethosu_ng.ops import QUANTIZE_PER_TENSOR
from ethosu_ng.passes import QuantizeStateBuffersPass

SPEC = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True)
FORMS = ("copy_", "functionalized")


def _lower(q, example, form):
    program = torch.export.export(q, example)
    if form == "functionalized":
        program = program.run_decompositions({})
        kinds = [s.kind.name for s in program.graph_signature.output_specs]
        assert kinds == ["BUFFER_MUTATION", "USER_OUTPUT"], kinds
    partitioner = EthosUNGPartitioner(SPEC)
    return to_edge_transform_and_lower(program, partitioner=[partitioner]), partitioner.report


@pytest.mark.parametrize("io_dtype", [torch.int8, torch.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("window,step", [(2, 1), (4, 1), (6, 4)])
def test_a_state_buffer_is_int8_on_the_npu_in_both_forms(window, step, io_dtype):
    torch.manual_seed(window * 10 + step)
    model = Streaming((1, window, 3), 1, step, False, ("flat_linear",), False, "plain").eval()
    g = torch.Generator().manual_seed(window)
    batches = [(torch.rand(1, step, 3, generator=g),) for _ in range(8)]
    q = quantize(model, batches[0], SPEC, batches[:4], input_dtype=io_dtype, output_dtype=io_dtype)
    describe = f"window {window} step {step} {io_dtype}"
    methods = {}
    for form in FORMS:
        q.state.zero_()  # calibration advanced the eager state; each program starts from zero
        edge, report = _lower(q, batches[0], form)
        program = edge.exported_program()
        assert report.partitions, f"{form}: nothing delegated {describe}"
        assert report.cpu_targets == {}, f"{form}: on the CPU {report.cpu_reasons} {describe}"
        assert program.state_dict["state"].dtype == torch.int8, f"{form} {describe}"
        outs = program.graph_module.graph.output_node().args[0]
        for spec, arg in zip(program.graph_signature.output_specs, outs):
            assert spec.arg.name == arg.name, (form, spec, arg.name)
            if spec.kind.name == "BUFFER_MUTATION":
                assert arg.meta["val"].dtype == torch.int8, (form, arg.meta["val"].dtype)
        ioq = io_quantization(edge)
        assert [o.dtype for o in ioq.outputs] == [io_dtype], (form, ioq.outputs)
        methods[form] = (ioq, CrossCheckedMethod(edge.to_executorch().buffer, SPEC.target))
    q.state.zero_()
    for k, xs in enumerate(batches[4:]):
        want = q(*xs)
        got = {}
        for form, (ioq, method) in methods.items():
            (y,) = method.execute([ioq.inputs[0].quantize(xs[0])], f"{form} step {k}")
            lsb = (y.int() - ioq.outputs[0].quantize(want).int()).abs().max().item()
            assert lsb <= 1, f"{form} step {k}: {lsb} LSB from eager {describe}"
            got[form] = y
        assert torch.equal(got["copy_"], got["functionalized"]), f"step {k} {describe}"


def _states_and_outputs(program, steps):
    module = program.module()
    seen = []
    for xs in steps:
        y = module(*xs)
        seen.append((y, module.state.clone()))
    return seen


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(streaming_cases())
def test_the_pass_rewrites_both_forms_of_the_write_back_alike(case):
    model, batches, in_dt, out_dt = streaming_model(case)
    q = quantize(model, batches[0], SPEC, batches[:4], input_dtype=in_dt, output_dtype=out_dt)
    q.state.zero_()
    seen = {}
    for form in FORMS:
        program = torch.export.export(q, batches[0])
        if form == "functionalized":
            program = program.run_decompositions({})
        run = QuantizeStateBuffersPass(SPEC)
        program = run(program)
        assert run.quantized == ["state"], (form, case)
        assert program.state_dict["state"].dtype == torch.int8, (form, case)
        outs = program.graph_module.graph.output_node().args[0]
        specs = program.graph_signature.output_specs
        assert [s.arg.name for s in specs] == [a.name for a in outs], (form, specs, outs)
        for spec, arg in zip(specs, outs):
            if spec.kind.name == "BUFFER_MUTATION":
                assert arg.target == QUANTIZE_PER_TENSOR, (form, arg.format_node())
                assert arg.meta["val"].dtype == torch.int8, (form, case)
        seen[form] = _states_and_outputs(program, batches[4:])
    for k, ((y, s), (y_f, s_f)) in enumerate(zip(seen["copy_"], seen["functionalized"])):
        assert torch.equal(y, y_f) and torch.equal(s, s_f), f"step {k} {case}"
