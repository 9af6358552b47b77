# SPDX-License-Identifier: BSD-3-Clause
"""What every seed-class property checks on a lowered model (tests/test_property_seed*.py).

For one quantized model and its compile spec: it is delegated; no op on the CPU at all (the
models use integer program IO, so no quantize/dequantize of the program IO runs there either,
and any CPU op is a float op of the class); each ``call_delegate``'s argument and result dtypes
in the parent program equal the blob's IO table; and the whole ``.pte`` run on the host runtime
(C++ delegate) is within 1 LSB of the eager quantized model, step after step (state buffers
carried on both sides), with the NPU model (U55/U65) equal to the TOSA reference model bit for bit
at every step (``CrossCheckedMethod``).
"""

from __future__ import annotations

import os
from typing import Callable, List, Sequence, Tuple

import pytest
import torch
from _pte import CrossCheckedMethod
from hypothesis import HealthCheck, given, settings

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec, io_quantization
from ethosu_ng.export import lower
from ethosu_ng.partitioning.boundary import float_boundary_tensors

TARGETS = ("ethos-u55-128", "ethos-u85-256")
CALL_DELEGATE = torch.ops.higher_order.executorch_call_delegate
# How the partitioner's report words an op the verified compile moved for a Vela stream deviation.
NPU_DEVIATION = (
    "verified compile: NPU model differs from TOSA",
    "verified compile: invalid command",
)

# Examples per family and seed class (two families: twice this per class): a fast run, and the
# deep one under ``-m slow`` (each seed test has both, ``DEPTHS``).
EXAMPLES_PER_FAMILY = int(os.environ.get("ETHOSU_NG_SEED_PROPERTY_EXAMPLES", "5"))
DEEP_EXAMPLES_PER_FAMILY = 25
DEPTHS = [
    pytest.param(EXAMPLES_PER_FAMILY, id="fast"),
    pytest.param(DEEP_EXAMPLES_PER_FAMILY, id="deep", marks=pytest.mark.slow),
]


def run_per_family(strategy, check: Callable, target: str, examples: int) -> None:
    """``check(case, target)`` on ``examples`` cases drawn from ``strategy`` (derandomized: a
    run draws the same cases every time; a failure prints the case)."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(strategy)
    def prop(case):
        check(case, target)

    prop()


def blob_io_matches_parent(program) -> int:
    """Assert every delegate's parent-side dtypes equal its blob's IO table; return the count."""
    gm = program.graph_module
    n_delegates = 0
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is CALL_DELEGATE:
            blob = DelegateBlob.from_bytes(getattr(gm, n.args[0].target).processed_bytes)
            assert [v.dtype for v in n.meta["val"]] == [s.dtype for s in blob.outputs]
            assert [a.meta["val"].dtype for a in n.args[1:]] == [s.dtype for s in blob.inputs]
            n_delegates += 1
    return n_delegates


def _as_list(v) -> List[torch.Tensor]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def check_lowered(
    q: torch.nn.Module,
    example: Tuple[torch.Tensor, ...],
    spec: EthosUNGCompileSpec,
    steps: Sequence[Tuple[torch.Tensor, ...]],
    input_dtype: torch.dtype,
    output_dtype: torch.dtype,
    inspect: Callable = lambda edge: None,
    describe: str = "",
):
    """Lower ``q`` (quantized with integer program IO) and check the seed-class guarantees.

    The program's state buffers start from ``q``'s buffers at this call (reset what calibration
    advanced before calling). ``inspect(edge)`` runs extra checks on the lowered program (before
    ``to_executorch``, which edits it)."""
    edge, part = lower(q, example, spec)
    program = edge.exported_program()
    report = part.report
    assert report.partitions, f"nothing delegated: {report.cpu_reasons} {describe}"
    # On Ethos-U85, Vela miscompiles a conv written transposed into a concatenation
    # (test_npu_model_u85.py::test_vela_u85_conv_written_transposed_into_a_concatenation_loses_
    # channels): the verified compile moves the ops responsible to the CPU, and the partitions
    # left may then need integer boundaries of their own (dequantizes on the CPU). Such a program
    # is not delegated whole; it must still be integer at every boundary and exact (below).
    contained = spec.family == "ethos-u85" and any(
        why.startswith(NPU_DEVIATION) for why in report.compiler_fallback.values()
    )
    assert contained or report.cpu_targets == {}, f"on the CPU: {report.cpu_reasons} {describe}"
    assert float_boundary_tensors(program) == []
    assert blob_io_matches_parent(program) == len(report.partitions)
    ioq = io_quantization(edge)
    assert {i.dtype for i in ioq.inputs} == {input_dtype}, (ioq.inputs, describe)
    assert {o.dtype for o in ioq.outputs} == {output_dtype}, (ioq.outputs, describe)
    inspect(edge)
    method = CrossCheckedMethod(edge.to_executorch().buffer, spec.target)
    for k, xs in enumerate(steps):
        want = [o.quantize(w) for o, w in zip(ioq.outputs, _as_list(q(*xs)))]
        got = method.execute(
            [i.quantize(x) for i, x in zip(ioq.inputs, xs)], f"step {k} {describe}"
        )
        assert len(got) == len(want)
        for j, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype == output_dtype
            lsb = (g.int() - w.int()).abs().max().item()
            assert lsb <= 1, f"step {k} output {j}: {lsb} LSB {describe}"
    return edge, part
