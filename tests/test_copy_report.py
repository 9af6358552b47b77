# SPDX-License-Identifier: BSD-3-Clause
"""The copies that remain (tosa_optimize/copy_report.py): every data-movement layer Vela runs
with NPU cycles (not a RESCALE) is counted once with the rule that predicts it, over drawn
chains of transposes, reshapes and slices on each target family; the named cases get their
reasons; a compiled program's report lists them and ``input_layout nhwc`` takes the input's
away."""

import sys
from pathlib import Path

import numpy as np
import torch
from _tosa_builder import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ethosu_ng
from ethosu_ng import EthosUNGCompileSpec, module_profile
from ethosu_ng.tools.report import format_text
from ethosu_ng.tosa_graph import tosa_ops
from ethosu_ng.tosa_optimize import copy_report
from ethosu_ng.vela.compiler import compile_tosa

sys.path.insert(0, str(Path(__file__).resolve().parent / "data"))
import first_hour_models as models  # noqa: E402

TARGETS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")


def _settings(n):
    return settings(
        max_examples=n, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )


def layers_and_copies(tosa: bytes, target: str):
    vela = compile_tosa(tosa, EthosUNGCompileSpec(target), "t")
    layers = module_profile.attribute(vela.layers, tosa_ops(tosa), [])
    return layers, copy_report.remaining_copies(tosa, layers)


def _clamped(b, x):
    return b.clamp(x, -100, 100)


@st.composite
def chains(draw):
    """input -> CLAMP -> steps (transpose by a drawn permutation, reshape to a drawn
    factorisation, slice of a drawn window) -> CLAMP -> output."""
    shape = [1, *draw(st.lists(st.sampled_from((2, 3, 4, 8)), min_size=2, max_size=3))]
    steps = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("transpose", "reshape", "slice")))
        if kind == "transpose":
            # Drawn at build time over the rank the chain has there (a reshape changes it).
            steps.append(("transpose", draw(st.randoms(use_true_random=False))))
        elif kind == "slice":
            steps.append(("slice", draw(st.integers(0, len(shape) - 1))))
        else:
            steps.append(("reshape", None))
    return shape, steps, draw(st.sampled_from(TARGETS))


def build_chain(shape, steps) -> bytes:
    b = Builder()
    x = _clamped(b, b.input(shape))
    for kind, arg in steps:
        cur = b.shape(x)
        if kind == "transpose":
            inner = list(range(1, len(cur)))
            if len(inner) < 2:
                continue  # no permutation of a rank-2 tensor keeps its batch first
            perm = [0, *arg.sample(inner, len(inner))]
            if perm == sorted(perm):  # never the identity: every drawn transpose is one
                perm = [0, *inner[1:], inner[0]]
            x = b.transpose(x, perm)
        elif kind == "slice":
            start, size = [0] * len(cur), list(cur)
            axis = min(arg, len(cur) - 1)
            if size[axis] > 1:
                start[axis], size[axis] = 1, size[axis] - 1
            x = b.slice(x, start, size)
        else:
            n = int(np.prod(cur))
            x = b.reshape(x, [1, n] if len(cur) > 2 else [1, *cur[1:], 1])
    b.output(_clamped(b, x))
    return b.tosa()


@_settings(24)
@given(chains())
def test_every_copy_is_counted_once_with_a_reason(case):
    shape, steps, target = case
    layers, copies = layers_and_copies(build_chain(shape, steps), target)
    copying = [
        layer
        for layer in layers
        if layer["data_movement_kind"] not in (None, module_profile.RESCALE_KIND)
        and layer["npu_cycles"] > 0
    ]
    assert len(copies) == len(copying)
    assert sum(e["npu_cycles"] for e in copies) == sum(int(x["npu_cycles"]) for x in copying)
    # Each copy is explained by the rule for its own operator.
    reason_of = {
        "TRANSPOSE": ("permutation", "the layout change", "a layout change"),
        "SLICE": ("a slice ",),
        "RESHAPE": ("a reshape ",),
    }
    for e in copies:
        assert e["pattern"].startswith(e["tosa_op"]), e
        assert e["reason"].startswith(reason_of.get(e["tosa_op"], f"{e['tosa_op']} as Vela")), e
        # The program's input and output are CLAMPed: no copy is the program's own layout.
        assert "program input" not in e["reason"] and "program output" not in e["reason"], e
    groups = copy_report.summarize(copies)
    assert sum(g["layers"] for g in groups) == len(copies)
    assert [g["npu_cycles"] for g in groups] == sorted(
        (g["npu_cycles"] for g in groups), reverse=True
    )


def test_an_nchw_input_transpose_is_named_as_the_program_layout():
    b = Builder()
    b.output(_clamped(b, b.transpose(b.input([1, 3, 16, 16]), [0, 2, 3, 1])))
    _, copies = layers_and_copies(b.tosa(), "ethos-u55-128")
    assert copies, "Vela folds no transpose of a graph input"
    assert {e["reason"] for e in copies} == {
        "the layout change of an NCHW program input (input_layout nhwc removes it)"
    }


def test_a_slice_a_reshape_reads_is_named_with_its_reader():
    b = Builder()
    x = _clamped(b, b.input([1, 8, 8, 16]))
    s = b.slice(x, [0, 1, 0, 0], [1, 6, 8, 16])
    b.output(_clamped(b, b.reshape(s, [1, 48, 16])))
    _, copies = layers_and_copies(b.tosa(), "ethos-u55-128")
    reasons = {e["reason"] for e in copies if e["tosa_op"] == "SLICE"}
    assert reasons == {"a slice read by RESHAPE, which takes no sliced input"}, copies


def test_a_channel_multiplier_depthwise_is_named_on_u85():
    """Without our rewrites (the graph as upstream lowers it), Vela interleaves the passes of a
    multiplier-2 depthwise convolution with Transpose layers."""
    from test_repeat_channels_for_depthwise import build

    _, copies = layers_and_copies(build(14, 14, 16, 2, k=3, s=2), "ethos-u85-256")
    dw = [e for e in copies if e["tosa_op"] == "DEPTHWISE_CONV2D"]
    assert dw and all(e["reason"].startswith("channel multiplier 2:") for e in dw), copies


def test_the_report_lists_the_copies_and_nhwc_input_takes_the_layout_one_away():
    torch.manual_seed(0)
    model, x = models.feature_map()
    io = dict(input_dtype="int8", output_dtype="int8", calibration=2)
    results = [
        ethosu_ng.compile(model, x, "ethos-u55-128", input_layout=layout, **io)
        for layout in ("nchw", "nhwc")
    ]
    reasons = [{e["reason"] for d in r.report["delegates"] for e in d["copies"]} for r in results]
    named = "the layout change of an NCHW program input (input_layout nhwc removes it)"
    assert named in reasons[0] and named not in reasons[1], reasons
    assert "copies that remain" in format_text(results[0].report)
