# SPDX-License-Identifier: BSD-3-Clause
"""NHWC program IO on every target: no NPU cycles transposing the input, none transposing a
feature-map output asked NHWC, and the program's outputs bit-exact to the NCHW program's.

Each case compiles a model twice from the same calibration batches (integer IO, so the
delegate's IO is the program's): NCHW, and with ``input_layout="nhwc"`` (and
``output_layout="nhwc"`` for a rank-4 output). Transposes are counted from Vela's layers before
each delegate's first computing layer and after its last (``io_layout.edge_transposes``),
whatever the IO's declared layout. Fast: a small feature-map CNN on the three targets. Slow:
the zoo's CNNs, and a property over channel counts and image shapes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import ethosu_ng
from ethosu_ng import io_layout
from ethosu_ng.runtime import run_pte

TARGETS = ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"]
# The CNNs of the zoo (bench/zoo_table.py ZOO; the others are transformers or hybrids).
ZOO_CNNS = [
    "torchvision:mobilenet_v3_small",
    "timm:mobilenetv2_100",
    "timm:resnet18",
    "timm:convnext_atto",
]
# The verified compile is about Vela's arithmetic, not the layout: off, to keep this cheap.
OPTIONS = dict(input_dtype="int8", output_dtype="int8", verify_npu=False, verify_lowering=False)


class FeatureCNN(nn.Module):
    """conv3x3 -> relu -> depthwise conv3x3 -> relu -> conv1x1: a rank-4 feature-map output."""

    def __init__(self, c_in=3, c_mid=8, c_out=4):
        super().__init__()
        self.c1 = nn.Conv2d(c_in, c_mid, 3, padding=1)
        self.c2 = nn.Conv2d(c_mid, c_mid, 3, padding=1, groups=c_mid)
        self.c3 = nn.Conv2d(c_mid, c_out, 1)

    def forward(self, x):
        return self.c3(self.c2(self.c1(x).relu()).relu())


def _pair(model, x, target, feature_map_out):
    """(NCHW program, NHWC program) of ``model`` for ``target``, same calibration."""
    g = torch.Generator().manual_seed(7)
    calib = [tuple(torch.rand(t.shape, generator=g) * 2 - 1 for t in x) for _ in range(2)]
    nchw = ethosu_ng.compile(model, x, target, calibration=calib, **OPTIONS)
    nhwc = ethosu_ng.compile(
        model,
        x,
        target,
        calibration=calib,
        input_layout="nhwc",
        output_layout="nhwc" if feature_map_out else None,
        **OPTIONS,
    )
    return nchw, nhwc


def _edges(result):
    return [io_layout.edge_transposes(d["layers"]) for d in result.report["delegates"]]


def _edge_transpose_layers(result, side):
    """Transpose layers (whatever their cycles) before each delegate's first computing layer
    (``input``) or after its last (``output``)."""
    n = 0
    for d in result.report["delegates"]:
        layers = d["layers"]
        computing = [k for k, x in enumerate(layers) if not x.get("data_movement_kind")]
        span = (
            (layers[: computing[0]] if side == "input" else layers[computing[-1] + 1 :])
            if computing
            else layers
        )
        n += sum(1 for x in span if x.get("data_movement_kind") == "Transpose")
    return n


def _qparams(result):
    """(scale, zero point) of every quantize in the quantized model, in graph order."""
    return [
        tuple(n.args[1:3])
        for n in result.quantized.graph.nodes
        if n.op == "call_function" and "quantize_per_tensor" in str(n.target)
    ]


def _check(nchw, nhwc, feature_map_out, n=2):
    # Calibrated on the same values, the two programs are quantized alike: a layout never
    # moves a scale (float kernels on channels-last data sum in another order).
    assert _qparams(nchw) == _qparams(nhwc)
    # The premise: the NCHW program's first NPU operation transposes the input.
    assert sum(e["input"] for e in _edges(nchw)) > 0, _edges(nchw)
    assert all(e["input"] == 0 for e in _edges(nhwc)), _edges(nhwc)
    assert _edge_transpose_layers(nhwc, "input") == 0
    assert nhwc.report["program_io"]["inputs"][0]["layout"] == "nhwc"
    if feature_map_out:
        # The NCHW output is transposed at the end (on the U85 Vela estimates that layer at
        # 0 cycles); the NHWC one leaves as the last computing layer writes it.
        assert _edge_transpose_layers(nchw, "output") > 0
        assert _edge_transpose_layers(nhwc, "output") == 0
        assert all(e["output"] == 0 for e in _edges(nhwc)), _edges(nhwc)
        assert nhwc.report["program_io"]["outputs"][0]["layout"] == "nhwc"
    shape = nchw.report["program_io"]["inputs"][0]["shape"]
    g = torch.Generator().manual_seed(11)
    for _ in range(n):
        x = torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
        want = run_pte(nchw.pte, [x])
        got = run_pte(nhwc.pte, [x.contiguous(memory_format=torch.channels_last)])
        assert len(got) == len(want)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype and torch.equal(a, b)  # bit for bit
            if feature_map_out and b.dim() == 4:
                assert b.is_contiguous(memory_format=torch.channels_last)


# Fast CI: U85 (tests/test_io_layout.py checks the same on U55 with the verified compile); U55
# and U65 in the slow run.
@pytest.mark.parametrize(
    "target",
    [pytest.param(t, marks=pytest.mark.slow) if t != "ethos-u85-256" else t for t in TARGETS],
)
def test_nhwc_io_no_transpose_and_bit_exact(target):
    torch.manual_seed(0)
    model = FeatureCNN().eval()
    nchw, nhwc = _pair(model, (torch.randn(1, 3, 12, 16),), target, feature_map_out=True)
    _check(nchw, nhwc, feature_map_out=True)


@pytest.mark.parametrize(
    "c_in, c_out, h, w",
    [(3, 3, 3, 3), pytest.param(2, 2, 2, 2, marks=pytest.mark.slow)],
)
def test_nhwc_io_of_a_shape_that_reads_as_both_layouts(c_in, c_out, h, w):
    """C == H == W: the NHWC shape is the NCHW one, so the delegate's IO layout cannot be told
    from its TOSA shape; the NPU must read the input and write the output interleaved."""
    torch.manual_seed(0)
    model = FeatureCNN(c_in, 4, c_out).eval()
    nchw, nhwc = _pair(model, (torch.randn(1, c_in, h, w),), "ethos-u55-128", True)
    _check(nchw, nhwc, feature_map_out=True, n=3)


def test_one_channel_input_asked_nhwc():
    """One channel: NCHW and NHWC are the same bytes (torch reports either dim order); the
    program takes the layout asked and answers as the NCHW one."""
    torch.manual_seed(0)
    model = FeatureCNN(1, 4, 2).eval()
    nchw, nhwc = _pair(model, (torch.randn(1, 1, 5, 6),), "ethos-u85-256", False)
    assert all(e["input"] == 0 for e in _edges(nchw) + _edges(nhwc))
    assert _qparams(nchw) == _qparams(nhwc)
    x = torch.randint(-128, 128, (1, 1, 5, 6), generator=torch.Generator().manual_seed(3))
    x = x.to(torch.int8)
    want = run_pte(nchw.pte, [x])
    got = run_pte(nhwc.pte, [x.contiguous(memory_format=torch.channels_last)])
    assert all(torch.equal(a, b) for a, b in zip(want, got))


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    target=st.sampled_from(TARGETS),
    c_in=st.integers(1, 8),
    c_mid=st.sampled_from([4, 8, 16, 24]),
    c_out=st.integers(1, 6),
    h=st.integers(3, 20),
    w=st.integers(3, 20),
)
def test_nhwc_io_over_channels_and_shapes(target, c_in, c_mid, c_out, h, w):
    torch.manual_seed(0)
    model = FeatureCNN(c_in, c_mid, c_out).eval()
    nchw, nhwc = _pair(model, (torch.randn(1, c_in, h, w),), target, feature_map_out=True)
    if c_in == 1:
        # One channel: NCHW and NHWC are the same bytes, nothing to transpose either way.
        assert all(e["input"] == 0 for e in _edges(nchw) + _edges(nhwc))
        return
    _check(nchw, nhwc, feature_map_out=c_out > 1)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model", ZOO_CNNS)
def test_zoo_cnns_take_nhwc_input_without_a_transpose(model, target):
    from ethosu_ng.tools.model_source import load_model

    m = load_model(model)
    nchw, nhwc = _pair(m.model, m.example_inputs, target, feature_map_out=False)
    _check(nchw, nhwc, feature_map_out=False, n=1)
