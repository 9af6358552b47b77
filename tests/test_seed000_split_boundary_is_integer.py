# SPDX-License-Identifier: BSD-3-Clause
"""Seed 000: a partition split in the middle of a graph never leaves a float tensor at a boundary.

Reproduced upstream (1.5.1): conv -> split -> branch into a CPU bmm gives delegate outputs
[float32, int8] while Vela writes int8 for both. Here: zero float boundary tensors, the parent's
call_delegate meta["val"] equals the blob's IO table, and every delegate's TOSA graph matches the
eager quantized model within 1 LSB; on the host runtime the NPU model equals the TOSA reference
model bit for bit.
"""

import pytest
import torch
from _pte import CrossCheckedMethod, assert_pte_carries, lowered_delegates
from conftest import calibration_batches
from models import AttentionBlock, ConvSplitBmm

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates, run_program_on_tosa
from ethosu_ng.partitioning.boundary import float_boundary_tensors

CALL_DELEGATE = torch.ops.higher_order.executorch_call_delegate

CASES = {
    "conv_split_bmm": (ConvSplitBmm, ["aten.bmm.default"]),
    "attention_bmm_on_cpu": (AttentionBlock, [torch.ops.aten.bmm.default]),
}


def delegate_calls(program):
    gm = program.graph_module
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is CALL_DELEGATE:
            yield n, getattr(gm, n.args[0].target)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_split_partition_boundary_is_integer(case, target):
    cls, cpu_ops = CASES[case]
    model = cls().eval()
    x = cls.example()
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(model, x, spec, calibration=calibration_batches(x))
    edge, part = lower(q, x, spec, cpu_ops=cpu_ops)
    program = edge.exported_program()

    calls = list(delegate_calls(program))
    assert calls, "nothing was delegated"
    # The pinned op really stayed on CPU.
    bmm = [
        n for n in program.graph.nodes if n.op == "call_function" and "aten.bmm" in str(n.target)
    ]
    assert bmm, "bmm should stay on CPU"
    assert float_boundary_tensors(program) == []

    for node, lowered in calls:
        blob = DelegateBlob.from_bytes(lowered.processed_bytes)
        # Inputs: the parent's argument tensors are exactly what the blob says the NPU reads.
        args = node.args[1:]
        assert len(args) == len(blob.inputs)
        for k, (a, spec_in) in enumerate(zip(args, blob.inputs)):
            v = a.meta["val"]
            assert v.dtype == spec_in.dtype, (node.name, "input", k)
            assert tuple(v.shape) == spec_in.shape
            assert v.element_size() == spec_in.elem_size
            assert spec_in.scale is not None and spec_in.scale > 0
        # Outputs: call_delegate meta["val"] (what ExecuTorch allocates) == blob IO table.
        vals = node.meta["val"]
        vals = vals if isinstance(vals, (list, tuple)) else [vals]
        assert len(vals) == len(blob.outputs)
        for k, (v, spec_out) in enumerate(zip(vals, blob.outputs)):
            assert v.dtype == spec_out.dtype, (node.name, "output", k, v.dtype, spec_out.dtype)
            assert tuple(v.shape) == spec_out.shape
            assert v.element_size() == spec_out.elem_size
            assert spec_out.scale is not None and spec_out.scale > 0
        # Typed IO also travels in the lowered module's meta.
        io = lowered.meta["_delegate_info_meta"]
        assert [s.dtype for s in io.outputs] == [s.dtype for s in blob.outputs]
        # Boundary users outside the delegate: dequantize, integer consumers or graph output.
        for user in node.users:
            for consumer in user.users:
                ok = (
                    consumer.op == "output"
                    or "dequantize" in str(consumer.target)
                    or consumer.target is CALL_DELEGATE  # int8 straight into the next delegate
                    or not consumer.meta["val"].dtype.is_floating_point
                )
                assert ok, f"{consumer.name} consumes a delegate output"

    # Numerics: each delegate's TOSA graph vs the eager quantized model at its boundary.
    for inputs in [x] + calibration_batches(x, n=2, seed=7):
        results = check_delegates(edge, inputs)
        assert len(results) == len(calls)
        for r in results:
            assert r.worst <= 1, f"{r.name}: {r.max_lsb} LSB"
        # End to end with every delegate on the TOSA reference model vs the quantized model.
        # (float IO here: compare on the output's quantization grid, in LSB)
        ref = q(*inputs)
        got = run_program_on_tosa(edge, inputs)
        for a, b, io in zip(got, ref, io_quantization(edge).outputs):
            assert io.grid_scale is not None
            assert (a - b).abs().max().item() <= 1.01 * io.grid_scale

    # Serialized: the .pte carries exactly these delegates with the IO tables checked above.
    delegates, out_io = lowered_delegates(edge), io_quantization(edge).outputs
    pte = edge.to_executorch().buffer
    assert_pte_carries(delegates, pte)
    # On the host runtime: the NPU model (U55) runs Vela's command streams bit for bit like the
    # TOSA reference model, and the split program stays on the quantized model's output grid.
    method = CrossCheckedMethod(pte, target)
    for inputs in [x] + calibration_batches(x, n=2, seed=7):
        got = method.execute(inputs, f"{case} {target}")
        for a, b, io in zip(got, q(*inputs), out_io):
            assert (a - b).abs().max().item() <= 1.01 * io.grid_scale


def test_commute_pass_makes_the_split_branch_int8():
    """The regression test's premise: the commute pass is what makes the branch exit int8."""
    from ethosu_ng.passes import CommuteQDQThroughPassThroughPass

    model, x = ConvSplitBmm().eval(), ConvSplitBmm.example()
    spec = EthosUNGCompileSpec("ethos-u55-128")
    ep = torch.export.export(quantize(model, x, spec), x)
    p = CommuteQDQThroughPassThroughPass()
    p(ep)
    assert p.rewrites >= 3  # split, reshape, transpose moved into int8
    split = [n for n in ep.graph.nodes if "split" in str(n.target)]
    assert split and split[0].meta["val"][0].dtype == torch.int8
