# SPDX-License-Identifier: BSD-3-Clause
"""TOSA WHILE_LOOP and COND_IF graphs for the Ethos-U85 branch tests
(tests/test_npu_model_u85_branch.py).

Upstream's own while_loop and cond op tests (``executorch/backends/arm/test/ops/test_while.py``,
``test_cond.py``, read where executorch is installed) lowered by upstream's TOSA INT pipeline with
the control-flow extension (``TosaPipelineINT(..., tosa_extensions=["cf"])``, as their
``*_tosa_INT`` tests); the TOSA flatbuffer the Arm TOSA backend emits is taken as it is. Vela
compiles such a graph for Ethos-U85 into one command stream that branches with NPU_OP_BRANCH.

Usage: python tests/control_flow_graphs.py [OUT_DIR]  (default: the fixtures in
tests/runtime/control_flow/)
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import List, Sequence

import numpy as np

UPSTREAM_OPS = "executorch.backends.arm.test.ops"
# (upstream test file, case) of every upstream while_loop and cond case.
WHILE_CASES = tuple(
    ("test_while", c)
    for c in (
        "two_in_two_out",
        "one_in_one_buffer_two_out",
        "decreasing_output",
        "additional_arg",
        "two_in_one_captured_out",
        "large_threshold",
    )
)
COND_CASES = tuple(
    ("test_cond", c)
    for c in (
        "zero_args_one_output",
        "one_arg_one_output",
        "one_arg_const_one_output",
        "one_arg_and_scalar_one_output",
        "one_arg_two_outputs",
        "two_args_one_output",
        "two_args_two_outputs",
        "nested_one_arg_one_output",
        "multiple_one_arg_one_output",
    )
)
# The fixtures the fast tests compile: the two loops that run their body more than once on
# small inputs, and one cond.
FIXTURES = (
    ("test_while", "one_in_one_buffer_two_out"),
    ("test_while", "two_in_one_captured_out"),
    ("test_cond", "one_arg_one_output"),
)
FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime", "control_flow")
DTYPES = {1: np.int8, 2: np.int16, 4: np.int32}


def upstream_tosa(test: str, case: str) -> bytes:
    """The TOSA flatbuffer upstream's TOSA INT pipeline lowers ``case`` of ``test`` to."""
    import torch
    from executorch.backends.arm.test.tester.test_pipeline import TosaPipelineINT
    from executorch.backends.arm.tosa.backend import TOSABackend

    ops = importlib.import_module(UPSTREAM_OPS)
    # Upstream files `import conftest` from their directory's parent, as pytest has it.
    test_dir = os.path.dirname(list(ops.__path__)[0])
    if test_dir not in sys.path:
        sys.path.append(test_dir)
    mod = importlib.import_module(f"{UPSTREAM_OPS}.{test}")
    torch.manual_seed(0)
    module, inputs = mod.test_cases[case]()
    captured: List[bytes] = []
    preprocess = TOSABackend.__dict__["preprocess"]

    def capture(*args, **kwargs):
        result = preprocess.__func__(*args, **kwargs)
        captured.append(result.processed_bytes)
        return result

    op = "torch.ops.higher_order.while_loop" if test == "test_while" else mod.aten_op
    TOSABackend.preprocess = staticmethod(capture)
    try:
        pipeline = TosaPipelineINT(module, inputs, op, tosa_extensions=["cf"])
        if test == "test_cond":
            # Calibrates on inputs taking either branch, as upstream's test_cond_tosa_INT.
            mod._set_branch_calibration_samples(pipeline, module, inputs)
        pipeline.pop_stage("run_method_and_compare_outputs")
        pipeline.run()
    finally:
        TOSABackend.preprocess = preprocess
    assert len(captured) == 1, f"{test} {case}: {len(captured)} TOSA graphs"
    return captured[0]


def fixture_tosa(test: str, case: str) -> bytes:
    with open(os.path.join(FIXTURE_DIR, f"{test}_{case}.tosa"), "rb") as f:
        return f.read()


# The TOSA reference model ends a WHILE_LOOP after this many evaluations of its condition, and
# reports the graph valid (reference_model src/ops/control_flow.h MAX_WHILE_LOOP_ITERATION).
TOSA_MAX_WHILE_ITERATIONS = 10000


def run_both(tosa: bytes, vela, inputs: Sequence[np.ndarray], tmp_dir: str):
    """One run of ``inputs`` (flat, in Vela's input order) on the NPU model (placed in scratch at
    Vela's offsets, the command stream run) and on the TOSA reference model on ``tosa``.

    Returns (model outputs or the model's error, TOSA reference outputs, model counters, how
    often the TOSA reference model evaluated a while loop's condition)."""
    import tosa_reference_model as refmodel

    from ethosu_ng import runtime as rt

    scratch = bytearray(vela.scratch_size)
    for t, a in zip(vela.inputs, inputs):
        scratch[t.offset : t.offset + a.nbytes] = a.tobytes()
    try:
        rt.npu_model_run(vela.command_stream, vela.weights, scratch)
        got = [
            np.frombuffer(
                bytes(scratch[t.offset : t.offset + int(np.prod(t.shape)) * t.elem_size]),
                DTYPES[t.elem_size],
            )
            for t in vela.outputs
        ]
    except rt.NpuModelError as e:
        got = e
    stats = rt.npu_model_stats()
    log = os.path.join(tmp_dir, "tosa_debug.txt")
    # Vela pads shapes to rank 6 with leading ones; the graph's own rank is found by trying.
    for strip in range(6):
        shapes = [tuple(t.shape[strip:]) for t in vela.inputs]
        try:
            outs, status = refmodel.run(
                tosa,
                [a.reshape(s) for a, s in zip(inputs, shapes)],
                initialize_variable_tensor_from_numpy=True,
                verbosity="HIGH",
                debug_mode="OP",
                debug_filename=log,
            )
        except Exception:  # noqa: BLE001 - a shape the graph does not take
            continue
        assert status == refmodel.GraphStatus.TOSA_VALID, status
        with open(log) as f:
            conds = sum("Conditional block value" in line for line in f)
        return got, [np.asarray(o).reshape(-1) for o in outs], stats, conds
    raise AssertionError("the TOSA reference model took no input shape")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else FIXTURE_DIR
    os.makedirs(out, exist_ok=True)
    for test, case in FIXTURES:
        with open(os.path.join(out, f"{test}_{case}.tosa"), "wb") as f:
            f.write(upstream_tosa(test, case))
